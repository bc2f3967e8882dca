"""Loaders for the official formats the papers used, plus a generic CSV/TSV loader.

Every loader validates as it reads: a malformed line raises :class:`DataFormatError` naming the
file, the 1-based line number and the problem (a line longer than ``_parse.MAX_LINE_BYTES``
included: files are read whole, lines are capped; see :mod:`fedsim.data._parse`).  Nothing is
dropped silently: duplicated (user, item) pairs follow an explicit ``duplicates`` policy
(default ``"error"``) and every merge, drop or filter is recorded in ``Ratings.info``.
"""

from __future__ import annotations

import csv
import io
import re
from decimal import Decimal
from pathlib import Path

import numpy as np

from ._build import build_ratings, check_choice
from .foursquare import load_foursquare
from ._parse import (
    INT64_MAX,
    INT64_MIN,
    MAX_LINE_BYTES,
    check_header,
    decode_strict,
    decode_text,
    first_bad_row,
    parse_numeric,
    read_bytes,
    refuse_non_text,
    require_rows,
    split_fields,
    split_first_line,
    strip_bom,
    strip_trailing_blank_lines,
    text_lines,
)
from .ratings import DataFormatError, Ratings

__all__ = [
    "ML100K_GENRES",
    "load_anime",
    "load_csv",
    "load_foursquare",
    "load_movielens",
    "load_netflix",
    "netflix_subset",
    "detect_movielens",
]

ML100K_GENRES = [
    "unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary",
    "Drama", "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller",
    "War", "Western",
]
NO_GENRE = "(no genres listed)"

_RATING_COLS = [("user", "int32"), ("item", "int32"), ("rating", "float32"), ("timestamp", "int")]

# variant -> (format, valid rating range); the step of the scale: whole stars up to 1M, half stars after
_ML_VARIANTS = {
    "100k": ("u.data", (1.0, 5.0)),
    "1m": ("dat", (1.0, 5.0)),
    "10m": ("dat", (0.5, 5.0)),
    "20m": ("csv", (0.5, 5.0)),
    "25m": ("csv", (0.5, 5.0)),
    "32m": ("csv", (0.5, 5.0)),
    "latest": ("csv", (0.5, 5.0)),
    "latest-small": ("csv", (0.5, 5.0)),
}
_ML_STEP = {"100k": 1.0, "1m": 1.0}  # others 0.5


_INT32_MAX = (1 << 31) - 1


def _line_of(first_line: int):
    return lambda row: first_line + int(row)


def _shown(v) -> str:
    """``v`` for a message, as short as it reads back exactly: ``5``, ``3.5``, ``5.00000001``
    (``:g`` alone showed 5.00000001 as 5, outside [0.5, 5])."""
    x = float(v)
    s = f"{x:g}"
    return s if float(s) == x else repr(x)


def _check_range(path, values: np.ndarray, lo: float, hi: float, first_line: int, what: str) -> None:
    bad = first_bad_row((values < lo) | (values > hi))
    if bad is not None:
        raise DataFormatError(path, first_line + bad, f"{what} {_shown(values[bad])} outside [{lo:g}, {hi:g}]")


def _check_positive(path, arr: np.ndarray, first_line: int, what: str, lo: int = 1) -> None:
    bad = first_bad_row(arr < lo)
    if bad is not None:
        raise DataFormatError(path, first_line + bad, f"{what} {int(arr[bad])} must be >= {lo}")


# ---------------------------------------------------------------------------------------------
# MovieLens


def _variant_from_name(name: str) -> str | None:
    s = name.lower()
    for pat, v in (
        (r"ml-?100k", "100k"), (r"ml-?10m", "10m"), (r"ml-?1m", "1m"), (r"ml-?20m", "20m"),
        (r"ml-?25m", "25m"), (r"ml-?32m", "32m"), (r"ml-?latest-small", "latest-small"), (r"ml-?latest", "latest"),
    ):
        if re.search(pat, s):
            return v
    return None


_ML_RATINGS_FILES = (("u.data", "u.data"), ("ratings.dat", "dat"), ("ratings.csv", "csv"))


def _ratings_files(d: Path) -> list[tuple[Path, str]]:
    """The MovieLens ratings file of folder ``d`` as [(file, format)] (empty when it has none).
    Raises ValueError when it holds more than one: the first of u.data, ratings.dat, ratings.csv
    was loaded, so an ml-1m folder that also held a u.data loaded as ML-100K."""
    found = [(d / f, fmt) for f, fmt in _ML_RATINGS_FILES if (d / f).is_file()]
    if len(found) > 1:
        raise ValueError(f"{d} holds {len(found)} MovieLens ratings files ({', '.join(f.name for f, _ in found)}): "
                         "which one is the dataset cannot be told; pass the ratings file to load")
    return found


def detect_movielens(path: str | Path) -> tuple[Path, str, str]:
    """Find the ratings file under ``path``: returns (ratings file, format, variant guess).

    Format is ``"u.data"`` (100K), ``"dat"`` (1M/10M ``::``) or ``"csv"`` (20M and later).
    Raises FileNotFoundError when nothing MovieLens-like is there, ValueError when a parent folder
    holds several MovieLens datasets or a folder holds more than one ratings file (``u.data``,
    ``ratings.dat``, ``ratings.csv``: which one is the dataset cannot be told; pass the file).
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no such file or folder: {p}")
    if p.is_dir():
        here = _ratings_files(p)
        if here:
            return here[0][0], here[0][1], _guess_variant(*here[0])
        found = []
        for d in (d for d in sorted(p.iterdir()) if d.is_dir()):
            inside = _ratings_files(d)
            if inside:
                found.append(inside[0])
        if len(found) == 1:
            return found[0][0], found[0][1], _guess_variant(*found[0])
        if found:  # the first in name order was loaded, silently (ml-100k of a folder also holding ml-1m)
            raise ValueError(
                f"{p} holds {len(found)} MovieLens datasets ({', '.join(d.parent.name for d, _ in found)}); "
                "pass the folder of the one to load"
            )
        raise FileNotFoundError(
            f"{p} holds no MovieLens ratings file (expected u.data, ratings.dat or ratings.csv)"
        )
    name = p.name.lower()
    if name == "u.data" or name.endswith(".data"):
        return p, "u.data", _guess_variant(p, "u.data")
    if name.endswith(".dat"):
        return p, "dat", _guess_variant(p, "dat")
    if name.endswith(".csv"):
        return p, "csv", _guess_variant(p, "csv")
    with open(p, "rb") as fh:
        head = fh.readline(MAX_LINE_BYTES + 1)  # unbounded, it read a file without line breaks whole
    refuse_non_text(p, head[:16])
    if b"::" in head:
        return p, "dat", _guess_variant(p, "dat")
    if b"\t" in head:
        return p, "u.data", _guess_variant(p, "u.data")
    if head.lower().startswith(b"userid,"):
        return p, "csv", _guess_variant(p, "csv")
    raise ValueError(f"{p}: not a MovieLens ratings file (u.data, ratings.dat or ratings.csv)")


def _guess_variant(f: Path, fmt: str) -> str:
    for part in (f.parent.name, f.parent.parent.name):
        v = _variant_from_name(part)
        if v is not None and _ML_VARIANTS[v][0] == fmt:
            return v
    if fmt == "u.data":
        return "100k"
    if fmt == "dat":
        return "10m" if f.stat().st_size > 100_000_000 else "1m"
    return "latest"


def load_movielens(
    path: str | Path,
    variant: str | None = None,
    *,
    item_space: str = "observed",
    duplicates: str = "error",
    genres: bool = True,
) -> Ratings:
    """Load MovieLens 100K, 1M, 10M, 20M, 25M, 32M or latest(-small).

    ``path`` is the dataset folder (or a parent holding exactly one such folder: several are a
    ``ValueError`` naming them) or the ratings file
    itself (``u.data``, ``ratings.dat``, ``ratings.csv``; a folder holding more than one of them is
    a ``ValueError`` naming them: pass the file).  ``variant`` (``"100k"``, ``"1m"``,
    ``"10m"``, ``"20m"``, ``"25m"``, ``"32m"``, ``"latest"``, ``"latest-small"``) is detected from
    the file and folder names when ``None``; given explicitly it must match the file format.

    ``item_space``: ``"observed"`` (default) indexes the item ids that occur in the ratings, in
    increasing id order; ``"id_range"`` uses index = id - 1 and ``n_items`` = the largest rated id
    (the FedRec code samples unrated items from the whole id range: 3,952 for ML-1M, versus 3,706
    observed; both give 1,682 for ML-100K).

    Genres (``u.item``+``u.genre``, ``movies.dat`` or ``movies.csv`` beside the ratings) become
    ``categories`` when ``genres`` is true and the file exists.  ML-100K keeps its 19 flags
    (including ``unknown``); later versions use the sorted genre names found, without
    ``(no genres listed)``.  Ratings off the variant's scale (whole stars 1-5 for 100K and 1M,
    half stars 0.5-5 from 10M on: a 3.7, or a 4.5 in 1M) are format errors, as is a line of
    ``movies.dat``, ``u.item`` or ``u.genre`` with a field too many or too few (a title holding
    ``::`` or a genre name holding ``|``), each naming the file and line.
    """
    f, fmt, guess = detect_movielens(path)
    # 1M and 10M share the .dat format: without a folder name saying which, the file's size
    # decided, and a small 10M extract is read on 1M's whole-star scale
    by_size = (variant is None and fmt == "dat"
               and all(_variant_from_name(part) is None for part in (f.parent.name, f.parent.parent.name)))
    if variant is None:
        variant = guess
    variant = variant.lower().removeprefix("ml-")
    if variant not in _ML_VARIANTS:
        raise ValueError(f"unknown MovieLens variant {variant!r}; expected one of {', '.join(_ML_VARIANTS)}")
    if _ML_VARIANTS[variant][0] != fmt:
        raise ValueError(f"MovieLens {variant} is stored as {_ML_VARIANTS[variant][0]!r}, but {f} is {fmt!r}")
    lo, hi = _ML_VARIANTS[variant][1]
    data = strip_bom(read_bytes(f))
    require_rows(f, data, None)
    if fmt == "csv":
        header, body = split_first_line(data)
        check_header(f, header, ["userId", "movieId", "rating", "timestamp"], ",")
        first = 2
        body = strip_trailing_blank_lines(body)
        require_rows(f, body, 1)
        cols = parse_numeric(f, body, sep=",", columns=_RATING_COLS, first_line=first)
    else:
        first = 1
        data = strip_trailing_blank_lines(data)
        cols = parse_numeric(f, data, sep="\t" if fmt == "u.data" else "::", columns=_RATING_COLS, first_line=first)
    users, items, values, ts = cols
    _check_positive(f, users, first, "user id")
    _check_positive(f, items, first, "movie id")
    try:
        _check_range(f, values, lo, hi, first, "rating")
        # a 3.7 (or 4.5 in ML-100K/1M) is no rating of the dataset's star scale: a corrupted field
        step = _ML_STEP.get(variant, 0.5)
        bad = first_bad_row(values / step != np.round(values / step))
        if bad is not None:
            scale = "whole stars 1-5" if step == 1 else "half stars 0.5-5"
            raise DataFormatError(f, first + bad, f"rating {_shown(values[bad])} is not on MovieLens {variant}'s "
                                  f"scale ({scale})")
    except DataFormatError as exc:
        if not by_size:
            raise
        raise DataFormatError(f, exc.line, f"{exc.reason} (read as MovieLens {variant}, guessed from the file's "
                              f"size: pass variant='10m' or '1m', or name its folder ml-10m / ml-1m)") from None
    _check_positive(f, ts, first, "timestamp", lo=0)

    meta_ids = meta_cats = names = None
    if genres:
        got = _movielens_genres(f.parent, fmt)
        if got is not None:
            meta_ids, meta_cats, names = got
    return build_ratings(
        users, items, values, ts,
        name=f"ml-{variant}", source=str(f), duplicates=duplicates, item_space=item_space,
        line_of=_line_of(first), item_meta_ids=meta_ids, item_meta_categories=meta_cats,
        category_names=names, info={"format": f"movielens-{variant}"},
    )


def _movielens_genres(folder: Path, fmt: str):
    if fmt == "u.data":
        item_file = folder / "u.item"
        if not item_file.is_file():
            return None
        names = list(ML100K_GENRES)
        gfile = folder / "u.genre"
        if gfile.is_file():
            names = _read_u_genre(gfile)
        return (*_read_u_item(item_file, len(names)), names)
    if fmt == "dat":
        mfile = folder / "movies.dat"
        if not mfile.is_file():
            return None
        data = strip_bom(read_bytes(mfile))
        require_rows(mfile, data, None)
        text = decode_text(data)
        rows = []
        for k, line in enumerate(text_lines(text), start=1):
            if not line.strip():
                continue
            # a line with a field too many ('1::Title::Extra::Comedy') took its last field as the
            # genres, silently
            mid, _title, genres = split_fields(mfile, k, line, "::", ("movie id", "title", "genres"))
            rows.append((_meta_id(mfile, k, mid, "movie id"), genres, k))
        return _genre_matrix(mfile, rows)
    mfile = folder / "movies.csv"
    if not mfile.is_file():
        return None
    data = strip_bom(read_bytes(mfile))
    require_rows(mfile, data, None)
    text = decode_text(data)
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or [h.strip() for h in header[:1]] != ["movieId"] or "genres" not in header:
        raise DataFormatError(mfile, 1, "expected header 'movieId,title,genres'")
    gi = header.index("genres")
    rows = []
    for k, rec in enumerate(reader, start=2):
        if not rec:
            continue
        if len(rec) != len(header):
            raise DataFormatError(mfile, reader.line_num, f"expected {len(header)} fields, found {len(rec)}")
        rows.append((_meta_id(mfile, reader.line_num, rec[0], "movie id"), rec[gi], reader.line_num))
    if not rows:
        raise DataFormatError(mfile, 1, "the file has a header and no movies")
    return _genre_matrix(mfile, rows)


_META_ID_RE = re.compile(r"\s*[+-]?[0-9]+\s*")


def _meta_id(path: Path, line: int, s: str, what: str) -> int:
    """The integer id of a metadata line (ASCII digits, 64-bit), or DataFormatError naming the line
    (``int()`` took '1_0' and non-ASCII digits, and an id beyond 64 bits failed later with
    OverflowError naming no file)."""
    if not _META_ID_RE.fullmatch(s):
        raise DataFormatError(path, line, f"{what} {s!r} is not an integer")
    v = int(s)
    if not INT64_MIN <= v <= INT64_MAX:
        raise DataFormatError(path, line, f"{what} {s.strip()!r} is out of the 64-bit integer range")
    return v


def _refuse_conflicting_ids(path: Path, ids: np.ndarray, lines: list[int], cats: np.ndarray, what: str) -> None:
    """An id listed again with other genres is a DataFormatError naming that line (the first in
    the file) and the id's first line: the first listing was used, silently.  A repeat with the
    same genres changes nothing and is accepted."""
    order = np.argsort(ids, kind="stable")  # within an id, rows in file order
    sid = ids[order]
    rep = np.flatnonzero(sid[1:] == sid[:-1]) + 1
    if not rep.size:
        return
    first = order[np.searchsorted(sid, sid[rep])]  # the first row of each repeated row's id
    conflict = [(int(order[k]), int(f)) for k, f in zip(rep, first) if not np.array_equal(cats[order[k]], cats[f])]
    if conflict:
        r, f = min(conflict)
        raise DataFormatError(path, lines[r], f"{what} {int(ids[r])} is listed again with other genres "
                              f"(first on line {lines[f]})")


def _genre_matrix(path: Path, rows: list[tuple[int, str, int]]):
    names = sorted({g for _, gs, _ in rows for g in gs.split("|") if g and g != NO_GENRE})
    col = {g: j for j, g in enumerate(names)}
    ids = np.array([mid for mid, _, _ in rows], dtype=np.int64)
    cats = np.zeros((len(rows), len(names)), dtype=bool)
    for r, (_, gs, _) in enumerate(rows):
        for g in gs.split("|"):
            if g in col:
                cats[r, col[g]] = True
    _refuse_conflicting_ids(path, ids, [ln for _, _, ln in rows], cats, "movie id")
    return ids, cats, names


def _read_u_genre(path: Path) -> list[str]:
    data = strip_bom(read_bytes(path))
    require_rows(path, data, None)
    pairs = []
    for k, line in enumerate(text_lines(decode_text(data)), start=1):
        if not line.strip():
            continue
        # 'Film|Noir|10' was the genre 'Film|Noir', silently
        name, idx = split_fields(path, k, line, "|", ("genre", "index"))
        if not idx.strip().isdigit():
            raise DataFormatError(path, k, f"field 'index': {idx!r} is not an integer")
        pairs.append((int(idx), name))
    pairs.sort()
    if [i for i, _ in pairs] != list(range(len(pairs))):
        raise DataFormatError(path, None, "genre indices are not 0..n-1")
    return [n for _, n in pairs]


def _read_u_item(path: Path, n_genres: int):
    data = strip_bom(read_bytes(path))
    require_rows(path, data, None)
    ids, flags, lines = [], [], []
    for k, line in enumerate(text_lines(decode_text(data)), start=1):
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) != 5 + n_genres:
            raise DataFormatError(path, k, f"expected {5 + n_genres} '|'-separated fields, found {len(parts)}")
        ids.append(_meta_id(path, k, parts[0], "movie id"))
        lines.append(k)
        g = parts[5:]
        if any(x not in ("0", "1") for x in g):
            raise DataFormatError(path, k, "genre flags must be 0 or 1")
        flags.append([x == "1" for x in g])
    ids_a, cats = np.array(ids, dtype=np.int64), np.array(flags, dtype=bool).reshape(len(ids), n_genres)
    _refuse_conflicting_ids(path, ids_a, lines, cats, "movie id")
    return ids_a, cats


# ---------------------------------------------------------------------------------------------
# Netflix Prize

_NF_HEADER = re.compile(rb"^[ \t]*(\d+):[ \t]*\r?$", re.M)
_NF_COLS = [("customer", "int"), ("rating", "int"), ("year", "int"), ("month", "int"), ("day", "int")]


def _netflix_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"no such file or folder: {path}")
    for d in (path, path / "training_set", path / "download" / "training_set"):
        files = sorted(d.glob("mv_*.txt")) if d.is_dir() else []
        if files:
            return files
    files = sorted(path.glob("combined_data_*.txt"))
    if files:
        return files
    raise FileNotFoundError(
        f"{path} holds no Netflix Prize files (expected mv_*.txt, training_set/mv_*.txt or combined_data_*.txt)"
    )


def _days_from_civil(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    months = (y - 1970) * 12 + (m - 1)
    return months.astype("datetime64[M]").astype("datetime64[D]").astype(np.int64) + (d - 1)


# bytes a line of the fast path may hold: '+', blanks and '\r' are left to the strict parser
_NF_FAST_BYTES = np.zeros(256, dtype=bool)
_NF_FAST_BYTES[np.frombuffer(b"0123456789,-\n", dtype=np.uint8)] = True


def _fixed_width_dates(seg: bytes) -> bool:
    """True when every line of ``seg`` is ``<digits>,<digits>,YYYY-MM-DD`` (ASCII digits only, the
    first two runs possibly empty, LF line ends, the last newline optional), else False.

    Then :func:`parse_numeric` on ``seg`` with the dashes turned into commas accepts exactly the
    lines :func:`_parse_netflix_slow` accepts, with the same values (an empty or too-long digit
    run makes both refuse).  Never raises.
    """
    if not seg:
        return False
    buf = np.frombuffer(seg if seg.endswith(b"\n") else seg + b"\n", dtype=np.uint8)
    if not _NF_FAST_BYTES[buf].all():
        return False
    nl = np.flatnonzero(buf == ord("\n"))
    # the shortest valid line, '1,1,2005-09-06\n', has 15 bytes: the offsets below then stay in their own line
    if np.diff(nl, prepend=-1).min() < 15:
        return False
    for ch in b",-":
        per_line = np.diff(np.searchsorted(np.flatnonzero(buf == ch), nl), prepend=0)
        if np.any(per_line != 2):
            return False
    # in ',YYYY-MM-DD\n' the comma is 11 bytes before the newline and the dashes 6 and 3; digits
    # in the eight other date places keep a line's other comma before the date ('1003,20,5-09-06'
    # would otherwise pass as year 5)
    if not (np.all(buf[nl - 11] == ord(",")) and np.all(buf[nl - 6] == ord("-")) and np.all(buf[nl - 3] == ord("-"))):
        return False
    return all(np.all((buf[nl - k] >= ord("0")) & (buf[nl - k] <= ord("9"))) for k in (10, 9, 8, 7, 5, 4, 2, 1))


def _parse_netflix_file(f: Path):
    data = strip_trailing_blank_lines(strip_bom(read_bytes(f)))
    require_rows(f, data, None)
    headers = list(_NF_HEADER.finditer(data))
    if not headers or data[: headers[0].start()].strip():
        raise DataFormatError(f, 1, "expected a 'MovieID:' line first")
    out_u, out_i, out_r, out_d = [], [], [], []
    seg_lines = []  # first file line of each segment
    for k, h in enumerate(headers):
        movie = int(h.group(1))
        if not 1 <= movie <= _INT32_MAX:
            raise DataFormatError(f, data.count(b"\n", 0, h.start()) + 1, f"movie id {movie} outside 1..{_INT32_MAX}")
        start = h.end() + 1 if h.end() < len(data) else h.end()
        stop = headers[k + 1].start() if k + 1 < len(headers) else len(data)
        seg = data[start:stop]
        first_line = data.count(b"\n", 0, start) + 1
        seg_lines.append(first_line)
        cols = None
        if _fixed_width_dates(seg):
            try:
                cols = parse_numeric(f, seg.replace(b"-", b","), sep=",", columns=_NF_COLS, first_line=first_line)
            except DataFormatError:
                cols = None  # re-read the original text for an exact message
        if cols is None:
            cols = _parse_netflix_slow(f, seg, first_line)
        cust, rating, y, mo, dd = cols
        _check_positive(f, cust, first_line, "customer id")
        bad = first_bad_row(cust > _INT32_MAX)
        if bad is not None:
            raise DataFormatError(f, first_line + bad, f"customer id {int(cust[bad])} exceeds {_INT32_MAX}")
        _check_range(f, rating.astype(np.float64), 1, 5, first_line, "rating")
        # dates before 1970 would be negative timestamps: no rating is that old
        bad = first_bad_row((mo < 1) | (mo > 12) | (dd < 1) | (dd > 31) | (y < 1970) | (y > 2100))
        days = np.zeros(len(cust), dtype=np.int64)
        if bad is None:
            days = _days_from_civil(y, mo, dd)
            month_of_day = days.astype("datetime64[D]").astype("datetime64[M]").astype(np.int64)
            bad = first_bad_row(month_of_day != (y - 1970) * 12 + (mo - 1))
        if bad is not None:
            raise DataFormatError(
                f, first_line + bad,
                f"invalid date {int(y[bad]):04d}-{int(mo[bad]):02d}-{int(dd[bad]):02d} (a real date in 1970-2100 expected)",
            )
        out_u.append(cust.astype(np.int32))
        out_i.append(np.full(len(cust), movie, dtype=np.int32))
        out_r.append(rating.astype(np.float32))
        out_d.append(days.astype(np.int32))
    if not any(len(u) for u in out_u):
        raise DataFormatError(f, seg_lines[0] - 1, "no rating lines after the 'MovieID:' line(s)")
    return out_u, out_i, out_r, out_d, seg_lines


def _parse_netflix_slow(f: Path, seg: bytes, first_line: int):
    rows = []
    lines = seg.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for k, line in enumerate(lines):
        ln = first_line + k
        line = line.rstrip(b"\r")
        parts = line.split(b",")
        if not line.strip():
            raise DataFormatError(f, ln, "empty line")
        if len(parts) != 3:
            raise DataFormatError(f, ln, f"expected 'CustomerID,Rating,Date', found {line[:120].decode('utf-8', 'replace')!r}")
        date = parts[2].strip()
        if not re.fullmatch(rb"\d{4}-\d{2}-\d{2}", date):
            raise DataFormatError(f, ln, f"field 'date': {date.decode('utf-8', 'replace')!r} is not YYYY-MM-DD")
        y, m, d = (int(x) for x in date.split(b"-"))
        for name, x in (("customer", parts[0]), ("rating", parts[1])):
            if not re.fullmatch(rb"\s*\d+\s*", x):
                raise DataFormatError(f, ln, f"field '{name}': {x.decode('utf-8', 'replace')!r} is not an integer")
            if int(x) > INT64_MAX:
                raise DataFormatError(f, ln, f"field '{name}': {x.decode().strip()!r} is out of the 64-bit integer range")
        rows.append((int(parts[0]), int(parts[1]), y, m, d))
    cols = list(zip(*rows)) if rows else [()] * 5
    return [np.array(c, dtype=np.int64) for c in cols]


def load_netflix(
    folder: str | Path,
    *,
    duplicates: str = "error",
    item_space: str = "observed",
    timestamps: bool = True,
) -> Ratings:
    """Load the Netflix Prize training set.

    ``folder`` holds the per-movie files ``mv_*.txt`` (directly or in ``training_set/``) or the
    Kaggle ``combined_data_*.txt`` files; a single such file also works.  Each file is a
    ``MovieID:`` line followed by ``CustomerID,Rating,YYYY-MM-DD`` lines (several movies may
    follow each other in one file).  Timestamps are the dates at 00:00 UTC.  The full set is
    100M ratings: about 1.2 GB with timestamps, 0.8 GB with ``timestamps=False``.
    """
    files = _netflix_files(Path(folder))
    us, its, rs, ds = [], [], [], []
    seg_row: list[int] = []  # global row where each segment starts
    seg_loc: list[tuple[Path, int]] = []  # (file, first line) of each segment
    row = 0
    for f in files:
        u, i, r, d, lines = _parse_netflix_file(f)
        for part, first_line in zip(u, lines):
            seg_row.append(row)
            seg_loc.append((f, first_line))
            row += len(part)
        us += u
        its += i
        rs += r
        ds += d
    seg_row_a = np.array(seg_row, dtype=np.int64)

    def line_of(r: int) -> tuple[Path, int]:
        s_ = int(np.searchsorted(seg_row_a, r, side="right")) - 1
        return seg_loc[s_][0], seg_loc[s_][1] + int(r - seg_row_a[s_])

    users = np.concatenate(us) if us else np.zeros(0, np.int32)
    items = np.concatenate(its) if its else np.zeros(0, np.int32)
    values = np.concatenate(rs) if rs else np.zeros(0, np.float32)
    ts = (np.concatenate(ds).astype(np.int64) * 86400) if (timestamps and ds) else (np.zeros(0, np.int64) if timestamps else None)
    source = str(files[0].parent if len(files) > 1 else files[0])
    return build_ratings(
        users, items, values, ts,
        name="netflix", source=source, duplicates=duplicates, item_space=item_space, line_of=line_of,
        info={"format": "netflix-prize", "files": len(files)},
    )


def netflix_subset(
    ratings: Ratings,
    n_users: int = 5000,
    n_items: int = 5000,
    *,
    order: str = "users_first",
) -> Ratings:
    """The FedRec++ NF5K5K recipe: the ``n_users`` most active users x ``n_items`` most popular items.

    ``order`` decides which cut sees the other:

    - ``"users_first"`` (default, the paper's wording "5,000 most popular movies from 5,000 most
      active users"): rank users by their number of ratings over the whole data, keep the top
      ``n_users``; then rank items by their number of ratings *among those users* and keep the
      top ``n_items``.
    - ``"items_first"``: the same with the roles swapped.
    - ``"independent"``: both rankings on the whole data, then the intersection.

    Ties are broken by lower dense index (= lower original id in the ``observed`` space).  The
    result is re-indexed over exactly the selected users and items (so ``n_users x n_items`` is
    the requested size even if some selected user has no rating left), in original-id order.
    FedRec++ reports 7,944,473 ratings for NF5K5K, which identifies the order once the full data
    is at hand (``info["netflix_subset"]`` records what was done).
    """
    check_choice("order", order, ("users_first", "items_first", "independent"))
    n_users = min(int(n_users), ratings.n_users)
    n_items = min(int(n_items), ratings.n_items)

    def top(counts: np.ndarray, k: int) -> np.ndarray:
        # stable sort on -count keeps lower index first among ties
        sel = np.argsort(-counts, kind="stable")[:k]
        mask = np.zeros(len(counts), dtype=bool)
        mask[sel] = True
        return mask

    if order == "users_first":
        ukeep = top(ratings.user_counts(), n_users)
        rows = ukeep[ratings.users]
        ikeep = top(np.bincount(ratings.items[rows], minlength=ratings.n_items), n_items)
    elif order == "items_first":
        ikeep = top(ratings.item_counts(), n_items)
        rows = ikeep[ratings.items]
        ukeep = top(np.bincount(ratings.users[rows], minlength=ratings.n_users), n_users)
    else:
        ukeep = top(ratings.user_counts(), n_users)
        ikeep = top(ratings.item_counts(), n_items)
    info = dict(ratings.info)
    info["netflix_subset"] = {"n_users": n_users, "n_items": n_items, "order": order}
    out = ratings.reindex(ukeep, ikeep, name=f"{ratings.name}-{n_users // 1000}k{n_items // 1000}k"
                          if n_users % 1000 == 0 and n_items % 1000 == 0 else f"{ratings.name}-subset", info=info)
    info["netflix_subset"]["ratings"] = len(out)
    return out


# ---------------------------------------------------------------------------------------------
# Foursquare check-ins: see .foursquare (load_foursquare is re-exported here)


# ---------------------------------------------------------------------------------------------
# Anime recommendations (Kaggle, CooperUnion)

UNRATED_POLICIES = ("drop", "implicit")


def load_anime(
    path: str | Path,
    unrated: str = "drop",
    *,
    duplicates: str = "error",
    item_space: str = "observed",
    genres: bool = True,
) -> Ratings:
    """Load the Anime Recommendations Database (``rating.csv``: ``user_id,anime_id,rating``).

    ``rating`` is 1..10, or -1 when the user watched the anime without rating it.  ``unrated``
    makes the policy explicit:

    - ``"drop"`` (default): remove the -1 rows (explicit ratings 1..10 remain);
    - ``"implicit"``: keep every row as a positive interaction with value 1.0.

    The count of -1 rows goes to ``info["unrated"]``.  The policy is applied before duplicate
    detection.  ``path`` is ``rating.csv`` or its folder; genres come from ``anime.csv`` beside
    it (comma-separated list in the ``genre`` column, multi-label).
    """
    check_choice("unrated", unrated, UNRATED_POLICIES)
    p = Path(path)
    f = p / "rating.csv" if p.is_dir() else p
    data = strip_bom(read_bytes(f))
    require_rows(f, data, None)
    header, body = split_first_line(data)
    check_header(f, header, ["user_id", "anime_id", "rating"], ",")
    body = strip_trailing_blank_lines(body)
    require_rows(f, body, 1)
    cols = parse_numeric(f, body, sep=",", columns=[("user_id", "int"), ("anime_id", "int"), ("rating", "int")],
                         first_line=2)
    users, items, values = cols
    _check_positive(f, users, 2, "user id")
    _check_positive(f, items, 2, "anime id")
    bad = first_bad_row(~((values == -1) | ((values >= 1) & (values <= 10))))
    if bad is not None:
        raise DataFormatError(f, 2 + bad, f"rating {int(values[bad])} is neither -1 nor in 1..10")
    is_unrated = values == -1
    n_unrated = int(is_unrated.sum())
    rows = np.arange(len(users))
    if unrated == "drop":
        if n_unrated == len(values):
            every = "the 1 rating is" if n_unrated == 1 else f"all {n_unrated} ratings are"
            raise DataFormatError(f, None, f"{every} -1 (unrated): nothing is left with "
                                  "unrated='drop'; use unrated='implicit'")
        keep = ~is_unrated
        users, items, values, rows = users[keep], items[keep], values[keep], rows[keep]
    else:
        values = np.ones(len(values), dtype=np.float32)
    meta_ids = meta_cats = names = None
    if genres and (f.parent / "anime.csv").is_file():
        meta_ids, meta_cats, names = _anime_genres(f.parent / "anime.csv")
    return build_ratings(
        users, items, values.astype(np.float32), None,
        name="anime", source=str(f), duplicates=duplicates, item_space=item_space,
        line_of=lambda r: 2 + int(rows[r]), item_meta_ids=meta_ids, item_meta_categories=meta_cats,
        category_names=names,
        info={"format": "anime", "unrated": {"policy": unrated, "rows": n_unrated}},
    )


def _anime_genres(path: Path):
    data = strip_bom(read_bytes(path))
    require_rows(path, data, None)
    reader = csv.reader(io.StringIO(decode_text(data)))
    header = next(reader, None)
    if not header or "anime_id" not in header or "genre" not in header:
        raise DataFormatError(path, 1, "expected a header with 'anime_id' and 'genre'")
    ai, gi = header.index("anime_id"), header.index("genre")
    rows = []
    for rec in reader:
        if not rec:
            continue
        if len(rec) != len(header):
            raise DataFormatError(path, reader.line_num, f"expected {len(header)} fields, found {len(rec)}")
        rows.append((_meta_id(path, reader.line_num, rec[ai], "anime id"),
                     [g.strip() for g in rec[gi].split(",") if g.strip()], reader.line_num))
    names = sorted({g for _, gs, _ in rows for g in gs})
    cidx = {g: j for j, g in enumerate(names)}
    cats = np.zeros((len(rows), len(names)), dtype=bool)
    for r, (_, gs, _) in enumerate(rows):
        for g in gs:
            cats[r, cidx[g]] = True
    ids = np.array([a for a, _, _ in rows], dtype=np.int64)
    _refuse_conflicting_ids(path, ids, [ln for _, _, ln in rows], cats, "anime id")
    return ids, cats, names


# ---------------------------------------------------------------------------------------------
# Generic CSV / TSV


def _col_index(ref: int | str | None, header: list[str] | None, what: str) -> int | None:
    if ref is None:
        return None
    if isinstance(ref, int):
        return ref
    if header is None:
        raise ValueError(f"{what}={ref!r} names a column but header=False")
    if ref not in header:
        raise ValueError(f"{what}={ref!r} is not in the header {header}")
    if header.count(ref) > 1:  # the first was taken, silently
        cols = [j for j, h in enumerate(header) if h == ref]
        raise ValueError(f"{what}={ref!r} names {len(cols)} columns of the header ({', '.join(map(str, cols))}); "
                         "give the column by its 0-based index")
    return header.index(ref)


_NUM_RE = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_PLAIN_INT_RE = re.compile(r"[+-]?\d+")
# the ISO 8601 forms load_csv reads; numpy's datetime64 alone would also take 'now' and 'today'
# (the wall clock), signed or 5-digit years and a 'Z' anywhere
_ISO_TIME_RE = re.compile(
    r"\d{4}-\d{2}(?:-\d{2}(?:[T ]\d{2}(?::\d{2}(?::\d{2}(?P<frac>\.\d+)?)?)?(?P<off>Z|[+-]\d{2}(?::?\d{2})?)?)?)?"
)


def _integer_of(s: str) -> int | None | bool:
    """The integer a numeric literal spells (``"7"``, ``"+7"``, ``"7.0"``, ``"7e0"``); ``None`` if
    it is not integer-valued (``"7.5"``); ``False`` if it lies outside the 64-bit range."""
    if _PLAIN_INT_RE.fullmatch(s):
        if len(s.lstrip("+-")) > 19:
            return False
        v = int(s)
    else:
        d = Decimal(s)
        if d != d.to_integral_value():
            return None
        if d.adjusted() > 18:
            return False
        v = int(d)
    return v if INT64_MIN <= v <= INT64_MAX else False


def _parse_ids(path, col: list[str], first_line: int, what: str) -> np.ndarray:
    """Ids of one column: integers when every id is a number, else strings (see :func:`load_csv`)."""
    if all(_NUM_RE.fullmatch(s) for s in col):
        out = np.empty(len(col), dtype=np.int64)
        for k, s in enumerate(col):
            v = _integer_of(s)
            if v is None:
                raise DataFormatError(path, first_line + k, f"{what} {s!r} is not an integer: the {what}s of this file "
                                      "are numbers, and numeric ids must be integer-valued (1 and 1.0 are one id)")
            if v is False:
                raise DataFormatError(path, first_line + k, f"{what} {s!r} is out of the 64-bit integer range")
            out[k] = v
        return out
    # string ids are compared as text; refuse the one ambiguity text comparison would hide
    seen: dict[int, tuple[str, int]] = {}
    for k, s in enumerate(col):
        if len(s) > 40 or not _NUM_RE.fullmatch(s):
            continue
        v = _integer_of(s)
        if v is None or v is False:
            continue
        prev, prev_k = seen.setdefault(v, (s, k))
        if prev != s and not (_PLAIN_INT_RE.fullmatch(s) and _PLAIN_INT_RE.fullmatch(prev)):
            raise DataFormatError(
                path, first_line + k,
                f"{what} {s!r} and {prev!r} (line {first_line + prev_k}) are the same integer written two ways, in a "
                f"column that also holds non-numeric {what}s (so {what}s are compared as text); write integer ids "
                "without a decimal part",
            )
    return np.array(col)


def _parse_times(path, col: list[str], first_line: int) -> np.ndarray:
    out = np.empty(len(col), dtype=np.int64)
    for k, s in enumerate(col):
        if _NUM_RE.fullmatch(s):
            v = _integer_of(s)
            if v is None:
                raise DataFormatError(path, first_line + k, f"time {s!r}: fractional epoch seconds (round them first)")
            if v is False:
                raise DataFormatError(path, first_line + k, f"time {s!r} is out of the 64-bit integer range")
            out[k] = v
            continue
        m = _ISO_TIME_RE.fullmatch(s)
        t = np.datetime64("NaT")
        if m is not None:
            # datetime64[s] would drop the fraction; epoch seconds refuse one, so ISO times do too
            if m["frac"] and m["frac"].strip(".0"):
                raise DataFormatError(path, first_line + k, f"time {s!r}: fractional seconds (round them first)")
            # the offset is applied here: numpy's own parsing of one warns (UserWarning "no explicit
            # representation of timezones") once per call site, and takes offsets up to +-23:59
            off, east = m["off"], 0
            if off and off != "Z":
                hh, mm = int(off[1:3]), int(off[3:].lstrip(":") or 0)
                east = (hh * 60 + mm) * (1 if off[0] == "+" else -1)
                if mm > 59 or not -12 * 60 <= east <= 14 * 60:
                    raise DataFormatError(path, first_line + k, f"time {s!r}: UTC offset {off} is not a real offset "
                                          "(-12:00 to +14:00, minutes below 60)")
            try:
                t = np.datetime64((s[: m.start("off")] if off else s).replace(" ", "T"), "s")
            except ValueError:  # a month 13, an hour 24, a February 30
                pass
        if np.isnat(t):
            raise DataFormatError(path, first_line + k, f"time {s!r} is neither epoch seconds nor ISO 8601")
        out[k] = t.astype(np.int64) - east * 60
    return out


def _check_scale(scale) -> tuple[float, float] | None:
    if scale is None:
        return None
    try:
        lo, hi = (float(x) for x in scale)
    except (TypeError, ValueError):
        raise ValueError(f"scale must be (low, high) or None, got {scale!r}") from None
    if not (np.isfinite(lo) and np.isfinite(hi) and lo <= hi):
        raise ValueError(f"scale must be (low, high) with finite low <= high, got {scale!r}")
    return lo, hi


def load_csv(
    path: str | Path,
    user_col: int | str = 0,
    item_col: int | str = 1,
    rating_col: int | str | None = 2,
    time_col: int | str | None = None,
    sep: str = ",",
    header: bool = True,
    *,
    scale: tuple[float, float] | None = (1, 5),
    duplicates: str = "error",
    item_space: str = "observed",
    implicit_threshold: float | None = None,
    name: str | None = None,
    encoding: str = "utf-8",
) -> Ratings:
    """Load a delimited ratings file with a column mapping.

    Columns are 0-based indices or header names, each column in at most one role (``user_col``
    equal to ``item_col`` is a ``ValueError``).  ``header=True`` (default) reads line 1 as column
    names; a line 1 of numbers only is a data row, an error naming the line (pass
    ``header=False``).  ``rating_col=None`` means implicit feedback
    (every row a positive interaction, value 1.0).  No quoting: fields must not contain ``sep``.
    ``implicit_threshold`` binarises afterwards with :meth:`Ratings.binarize` (keep
    ``value >= threshold`` as 1.0, drop the rest, reported).

    **Rating scale.** ``scale=(low, high)`` declares the valid ratings (inclusive); a rating
    outside it raises :class:`DataFormatError` naming the file and line.  The default ``(1, 5)``
    is the 5-star scale of MovieLens and Netflix, the explicit data of every reproduced paper;
    another scale must be declared (``scale=(0.5, 5)``, ``scale=(1, 10)``), and ``scale=None``
    turns the check off (counts, scores).  Ratings must be finite numbers in any case; the scale
    is not used when ``rating_col`` is ``None``.

    **Ids.** A user (or item) column whose ids are all numbers holds integer ids: integer-valued
    spellings are the same id (``1``, ``+1``, ``1.0`` and ``1e0`` are user 1), and a
    non-integer id such as ``1.5`` is an error naming the line.  A column holding any
    non-numeric id (``alice``) holds string ids compared as text (indexed in sorted order), and
    an integer written two ways there (``1`` and ``1.0``) is an error, since text comparison
    would make two users of it.  Ids must fit in 64 bits.

    **Times.** ``time_col`` holds epoch seconds (integer-valued) or ISO 8601 date-times:
    ``YYYY-MM``, ``YYYY-MM-DD``, or ``YYYY-MM-DD`` then ``T`` or a space and ``hh``, ``hh:mm``
    or ``hh:mm:ss``, optionally followed by ``Z`` or an offset ``+hh``, ``+hhmm``, ``+hh:mm``
    (or ``-``; a real one, -12:00 to +14:00); a time without either is UTC.  Both forms must be whole seconds (``.0`` is
    fine, ``.9`` is an error naming the line).  Anything else, including words such as ``now``
    or ``today``, is an error naming the file and line, as is a time before 1970 (negative).

    **Rows.** Duplicated (user, item) pairs follow ``duplicates`` (default ``"error"``); a BOM,
    CRLF line ends and blank lines at the end of the file are accepted; an empty file, a header
    without rows, a blank line inside the data, a wrong field count and bytes that are not valid
    ``encoding`` (an ASCII-compatible encoding) are errors naming the file and line.
    """
    f = Path(path)
    bounds = _check_scale(scale)
    data = strip_bom(read_bytes(f))
    require_rows(f, data, None)
    names = None
    first = 1
    body = data
    if header:
        h, body = split_first_line(data)
        names = [x.strip() for x in decode_strict(f, h, encoding).split(sep)]
        if all(_NUM_RE.fullmatch(x) for x in names):
            # a file without a header read with the default header=True: its first rating
            # became the column names and was lost, silently
            raise DataFormatError(
                f, 1, f"header=True, but line 1 holds only numbers ({sep.join(names)!r}), a data row, not column "
                "names; pass header=False for a file without a header",
            )
        first = 2
        body = strip_trailing_blank_lines(body)
        require_rows(f, body, 1)
    else:
        body = strip_trailing_blank_lines(body)
    ui = _col_index(user_col, names, "user_col")
    ii = _col_index(item_col, names, "item_col")
    ri = _col_index(rating_col, names, "rating_col")
    ti = _col_index(time_col, names, "time_col")
    ncols = len(names) if names is not None else None
    fl, _ = split_first_line(body)
    if ncols is None:
        ncols = len(fl.split(sep.encode()))
    used: dict[int, str] = {}
    for what, j in (("user_col", ui), ("item_col", ii), ("rating_col", ri), ("time_col", ti)):
        if j is not None and not (0 <= j < ncols):
            shown = (h if header else fl).decode("utf-8", "replace")
            hint = "; is the separator right?" if ncols == 1 else ""
            raise ValueError(f"{what}={j} is out of range for {ncols} columns: {f}, line {first - 1 if header else first} "
                             f"has {ncols} field(s) separated by {sep!r} ({shown[:120]!r}){hint}")
        if j is not None and j in used:  # user_col=item_col read each user as rating the item of its own id
            raise ValueError(f"{used[j]} and {what} name the same column ({j}); each must be a different column")
        if j is not None:
            used[j] = what

    cols_spec = [(names[j] if names else f"column {j}", "float") for j in range(ncols)]
    for j in (ui, ii):
        cols_spec[j] = (cols_spec[j][0], "int")
    if ti is not None:
        cols_spec[ti] = (cols_spec[ti][0], "int")
    try:
        numeric = parse_numeric(f, body, sep=sep, columns=cols_spec, first_line=first)
    except DataFormatError:
        numeric = None  # fall through to the general parser, which gives the message if needed
    if numeric is not None:
        users, items = numeric[ui], numeric[ii]
        values = numeric[ri] if ri is not None else np.ones(len(users))
        ts = numeric[ti] if ti is not None else None
    else:
        users_l, items_l, vals_l, ts_l = [], [], [], []
        lines = decode_strict(f, body, encoding, first).split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        for k, line in enumerate(lines):
            ln = first + k
            line = line.rstrip("\r")
            if not line.strip():
                raise DataFormatError(f, ln, "empty line")
            parts = line.split(sep)
            if len(parts) != ncols:
                raise DataFormatError(f, ln, f"expected {ncols} fields separated by {sep!r}, found {len(parts)}")
            u, it = parts[ui].strip(), parts[ii].strip()
            if not u or not it:
                raise DataFormatError(f, ln, "empty user or item id")
            users_l.append(u)
            items_l.append(it)
            if ri is not None:
                x = parts[ri].strip()
                if not _NUM_RE.fullmatch(x):
                    raise DataFormatError(f, ln, f"rating {x!r} is not a number")
                v = float(x)
                if not np.isfinite(v):
                    raise DataFormatError(f, ln, f"rating {x!r} is not finite")
                vals_l.append(v)
            if ti is not None:
                ts_l.append(parts[ti].strip())
        users = _parse_ids(f, users_l, first, "user id")
        items = _parse_ids(f, items_l, first, "item id")
        values = np.array(vals_l, dtype=np.float64) if ri is not None else np.ones(len(users_l))
        ts = _parse_times(f, ts_l, first) if ti is not None else None
    if ri is not None and bounds is not None:
        lo, hi = bounds
        bad = first_bad_row((values < lo) | (values > hi))
        if bad is not None:
            raise DataFormatError(
                f, first + bad, f"rating {_shown(values[bad])} outside the declared scale [{lo:g}, {hi:g}]; pass "
                "scale=(low, high) for another scale, or scale=None for no check",
            )
    if ts is not None:
        bad = first_bad_row(ts < 0)
        if bad is not None:
            raise DataFormatError(f, first + bad, f"time {int(ts[bad])} is before 1970 (negative epoch seconds)")
    info = {
        "format": "csv", "implicit": rating_col is None, "scale": None if ri is None else bounds,
        "ids": {"user": "int" if users.dtype.kind in "iu" else "str", "item": "int" if items.dtype.kind in "iu" else "str"},
    }
    r = build_ratings(
        users, items, values, ts,
        name=name or f.stem, source=str(f), duplicates=duplicates, item_space=item_space,
        line_of=_line_of(first), info=info,
    )
    if implicit_threshold is not None:
        r = r.binarize(implicit_threshold)
    return r
