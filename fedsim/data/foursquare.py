"""Foursquare check-ins: the loader, the venue category map and the FPL user filter.

The FedBPR city files (``user_id  venue_id  type  utc``) give each venue one of ~400 fine-grained
Foursquare types.  FPL (Anelli et al. 2022, Table 5) measures bias disparity over the nine
top-level categories of Foursquare's venue hierarchy; ``foursquare_categories.tsv`` beside this
module maps every type name of that hierarchy to its top-level category, with its sources in
the file header.  Some names are mangled in the source files (``Caf\\x1a\\x1a`` for ``Café``);
:func:`repair_type` restores them when the intended name is unambiguous.
"""

from __future__ import annotations

import calendar
import datetime as _dt
import logging
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping

import numpy as np

from ._build import build_ratings
from ._parse import decode_strict, read_bytes, require_rows, strip_bom, strip_trailing_blank_lines
from .ratings import DataFormatError, Ratings

__all__ = [
    "TOP_LEVEL_CATEGORIES",
    "USER_FILTERS",
    "category_map",
    "load_foursquare",
    "repair_type",
]

log = logging.getLogger("fedsim.data")

#: The nine top-level categories, in the order of FPL's Table 5.
TOP_LEVEL_CATEGORIES = (
    "Arts & Entertainment",
    "College & University",
    "Food",
    "Nightlife Spot",
    "Outdoors & Recreation",
    "Professional & Other Places",
    "Residence",
    "Shop & Service",
    "Travel & Transport",
)

#: Named user filters: keep users with at least this many distinct venues.
USER_FILTERS = {
    "paper": 21,  # FPL paper, section 5.1: "we have kept users with more than 20 interactions"
    "code": 20,  # the authors' FedBPR generate_dataset.py: groupby('user_id').filter(len(x) >= 20)
}

CATEGORY_FILE = "foursquare_categories.tsv"
CATEGORY_MODES = ("top", "type")

_MONTHS = {m: k for k, m in enumerate(calendar.month_abbr) if m}
_DAYS = {d: k for k, d in enumerate(calendar.day_abbr)}
_FSQ_ALIASES = {
    "user": ("user_id", "userid", "user"),
    "venue": ("venue_id", "venueid", "venue", "item_id"),
    "category": ("type", "venue_category", "category", "venue_category_name"),
    "utc": ("utc", "utc_time", "utctime", "time", "timestamp"),
    "offset": ("timezone_offset", "tz_offset", "offset"),
}
_ID_INT_RE = re.compile(r"[0-9]{1,18}")
_MANGLED = re.compile("[\x1a\ufffd]+")


# ---------------------------------------------------------------------------------------------
# the category map


def _parse_category_file(text: str, source: str) -> dict[str, tuple[str, str]]:
    rows: dict[str, tuple[str, str]] = {}
    header_seen = False
    for k, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if not header_seen:
            if parts != ["type", "top_level", "source"]:
                raise DataFormatError(source, k, "expected the header 'type<TAB>top_level<TAB>source'")
            header_seen = True
            continue
        if len(parts) != 3 or not all(p.strip() for p in parts):
            raise DataFormatError(source, k, f"expected 3 non-empty tab-separated fields, found {line!r}")
        name, top, src = parts
        if top not in TOP_LEVEL_CATEGORIES:
            raise DataFormatError(source, k, f"{top!r} is not one of the nine top-level categories")
        if name in rows:
            raise DataFormatError(source, k, f"type {name!r} is listed twice")
        rows[name] = (top, src)
    if not rows:
        raise DataFormatError(source, None, "no categories")
    return rows


@lru_cache(maxsize=None)
def _category_rows() -> Mapping[str, tuple[str, str]]:
    res = resources.files("fedsim.data").joinpath(CATEGORY_FILE)
    return MappingProxyType(_parse_category_file(res.read_text(encoding="utf-8"), f"fedsim/data/{CATEGORY_FILE}"))


def category_map(with_source: bool = False) -> dict[str, Any]:
    """The shipped map: Foursquare type name -> top-level category (one of
    :data:`TOP_LEVEL_CATEGORIES`); with ``with_source`` the values are ``(top_level, source)``
    pairs, ``source`` being ``api-2014``, ``list-2013``, ``top-level`` or ``judgement`` (see the
    header of ``fedsim/data/foursquare_categories.tsv``)."""
    rows = _category_rows()
    return {k: (v if with_source else v[0]) for k, v in rows.items()}


def _norm(s: str) -> str:
    return " ".join(s.split()).casefold()


def repair_type(name: str, known: Iterable[str]) -> str | None:
    """The one name of ``known`` that a mangled ``name`` stands for, else ``None``.

    A run of ``n`` SUB characters (0x1A, what an ASCII conversion writes for each byte it cannot
    represent) or U+FFFD replacement characters may stand for 1 to ``n`` non-ASCII characters
    (the UTF-8 ``é`` is two bytes, the Latin-1 one byte); the rest must match exactly.  So
    ``Caf\\x1a\\x1a`` and ``Caf\\x1a`` both give ``Café``.  ``None`` when ``name`` has no such
    character, or when no name or several names of ``known`` match.
    """
    if not _MANGLED.search(name):
        return None
    pattern, pos = [], 0
    for m in _MANGLED.finditer(name):
        pattern.append(re.escape(name[pos : m.start()]) + "[^\\x00-\\x7f]{1,%d}" % len(m.group()))
        pos = m.end()
    pattern.append(re.escape(name[pos:]))
    rx = re.compile("".join(pattern))
    hits = [k for k in known if rx.fullmatch(k)]
    return hits[0] if len(hits) == 1 else None


class _Resolver:
    """Type name as read -> known name: exact, then whitespace/case-insensitive, then repaired."""

    def __init__(self, known: Iterable[str]):
        self.known = list(known)
        self.exact = set(self.known)
        by_norm: dict[str, list[str]] = {}
        for k in self.known:
            by_norm.setdefault(_norm(k), []).append(k)
        self.by_norm = {n: v[0] for n, v in by_norm.items() if len(v) == 1}
        self.repaired: dict[str, str] = {}

    def __call__(self, raw: str) -> str | None:
        if raw in self.exact:
            return raw
        hit = self.by_norm.get(_norm(raw)) or repair_type(raw, self.known)
        if hit is not None:
            self.repaired[raw] = hit
        return hit


# ---------------------------------------------------------------------------------------------
# the loader


_TIME_RE = re.compile(r"\s*(\w{3})\s+(\w{3})\s+(\d{1,2})\s+(\d{2}):(\d{2}):(\d{2})\s+([+-])(\d{2})(\d{2})\s+(\d{4})\s*")
_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()


@lru_cache(maxsize=8192)
def _day(year: int, month: int, day: int) -> tuple[int, int]:
    """(days since 1970-01-01, weekday Mon=0); ValueError for an impossible date."""
    d = _dt.date(year, month, day)
    return d.toordinal() - _EPOCH_ORDINAL, d.weekday()


def _parse_fsq_time(s: str) -> int:
    """'Tue Apr 03 18:07:30 +0000 2012' -> epoch seconds (UTC).  ValueError saying what is wrong:
    an impossible date or clock time, a weekday that does not match the date, or an offset whose
    minutes exceed 59 or that lies outside the real range of UTC offsets, -1200 to +1400."""
    m = _TIME_RE.fullmatch(s)
    if m is None or m.group(1) not in _DAYS or m.group(2) not in _MONTHS:
        raise ValueError("not like 'Tue Apr 03 18:07:30 +0000 2012'")
    wday, mon, day, hh, mi, ss, sign, th, tm, year = m.groups()
    h, minute, sec = int(hh), int(mi), int(ss)
    if h > 23 or minute > 59 or sec > 59:
        raise ValueError(f"impossible time {hh}:{mi}:{ss}")
    try:
        days, weekday = _day(int(year), _MONTHS[mon], int(day))
    except ValueError as exc:
        raise ValueError(f"impossible date ({exc})") from None
    if weekday != _DAYS[wday]:
        raise ValueError(f"{year}-{_MONTHS[mon]:02d}-{int(day):02d} is a {calendar.day_abbr[weekday]}, not a {wday}")
    if int(tm) > 59:
        raise ValueError(f"impossible UTC offset {sign}{th}{tm} (minutes above 59)")
    east = (int(th) * 60 + int(tm)) * (1 if sign == "+" else -1)  # minutes ahead of UTC
    # real offsets run from UTC-12:00 (Baker Island) to UTC+14:00 (Kiribati's Line Islands)
    if not -12 * 60 <= east <= 14 * 60:
        raise ValueError(f"UTC offset {sign}{th}{tm} is outside the real range of offsets, -1200 to +1400")
    return days * 86400 + h * 3600 + minute * 60 + sec - east * 60


def _min_venues(user_filter: Any, min_interactions: int | None) -> tuple[int, str]:
    if min_interactions is not None:
        if user_filter != "paper":
            raise ValueError("give user_filter or min_interactions (its older name), not both")
        user_filter = min_interactions
    if user_filter is None:
        return 0, "none"
    if isinstance(user_filter, str):
        if user_filter not in USER_FILTERS:
            raise ValueError(f"user_filter must be one of {', '.join(map(repr, USER_FILTERS))}, an int or None, "
                             f"got {user_filter!r}")
        return USER_FILTERS[user_filter], user_filter
    if isinstance(user_filter, bool) or not isinstance(user_filter, (int, np.integer)) or user_filter < 0:
        raise ValueError(f"user_filter must be 'paper', 'code', an int >= 0 or None, got {user_filter!r}")
    n = int(user_filter)
    return n, ("none" if n == 0 else f"at least {n}")


def load_foursquare(
    path: str | Path,
    user_filter: str | int | None = "paper",
    *,
    categories: str | Mapping[str, str] | None = "top",
    duplicates: str = "error",
    encoding: str = "utf-8",
    min_interactions: int | None = None,
) -> Ratings:
    """Load Foursquare check-ins as implicit feedback (value 1.0), one city/country file.

    **Format** (the FedBPR ``raw_datasets`` files): tab-separated with a header
    ``user_id  venue_id  type  utc``; ``utc`` like ``Tue Apr 03 18:07:30 +0000 2012`` (the
    weekday must match the date); ``type`` is the venue category.  Columns are found by header
    name, so other orders work; without a header the Yang et al. TIST2015 order
    ``user, venue, utc_time, timezone_offset`` is assumed (no categories then).  User ids made
    of digits only become integers, other ids stay strings; one number written two ways
    (``007`` and ``7``) is an error naming both lines.  A BOM, CRLF and blank lines at the
    end are accepted; an empty file, a header without rows, a blank line inside, a wrong field
    count, an impossible time, a UTC offset with minutes above 59 or outside the real range
    -1200 to +1400, and bytes that are not valid ``encoding`` raise
    :class:`DataFormatError` naming the file and line.

    **Duplicates.** ``duplicates="error"`` (default): the FedBPR files hold one row per (user,
    venue), so a repeat means another kind of file (raw TIST2015 check-ins repeat venues), where
    the choice matters for the temporal split: ``"keep_first"`` keeps the first visit,
    ``"keep_last"`` the last one (file order), ``"mean"`` one row with the latest time.

    **User filter** (applied after duplicates, on distinct venues), then users and venues are
    re-indexed (:meth:`Ratings.filter_users`):

    - ``"paper"`` (default): more than 20 venues (>= 21), the FPL paper's section 5.1;
    - ``"code"``: at least 20 venues, what the authors' FedBPR ``generate_dataset.py`` does
      (and the shared data README);
    - an int ``n``: at least ``n``; ``None`` or ``0``: no filter.

    ``min_interactions=n`` is the older name of ``user_filter=n``.  ``info["user_filter"]`` says
    what was applied.  No user left raises ``ValueError`` naming the file.

    **Categories** (single label per venue, ``Ratings.categories``):

    - ``"top"`` (default): the nine top-level categories of FPL Table 5, always these nine
      columns in that order (:data:`TOP_LEVEL_CATEGORIES`), through the shipped map
      (:func:`category_map`);
    - ``"type"``: one column per venue type found (sorted);
    - a mapping ``type -> category name``: one column per distinct value of the mapping;
    - ``None``: no categories.

    Type names are matched exactly, then ignoring case and runs of spaces, then by repairing
    mangled characters (:func:`repair_type`: ``Caf\\x1a\\x1a`` -> ``Café``) against the map's
    names; with ``"type"`` a name that matches nothing stays as read.  A venue whose type does
    not map gets no category.  ``info["categories"]`` reports the mode, the repairs
    (``repaired``: name as read -> name used, ``rows_repaired``) and what is left unmapped:
    ``types`` (name -> check-ins), ``n_types``, ``venues`` and ``checkins`` over the whole file,
    ``venues_kept`` and ``checkins_kept`` after the user filter.  A venue listed with different
    categories keeps its first one (``venues_with_conflicting_type``).
    """
    f = Path(path)
    if f.is_dir():
        raise IsADirectoryError(f"load_foursquare expects one check-in file, got the folder {f}")
    if isinstance(categories, str) and categories not in CATEGORY_MODES:
        raise ValueError(f"categories must be 'top', 'type', a mapping or None, got {categories!r}")
    min_venues, rule = _min_venues(user_filter, min_interactions)

    data = strip_trailing_blank_lines(strip_bom(read_bytes(f)))
    require_rows(f, data, None)
    lines = decode_strict(f, data, encoding).split("\n")
    if lines[-1] == "":
        lines.pop()
    head = [h.strip().lower() for h in lines[0].rstrip("\r").split("\t")]
    col: dict[str, int] = {}
    if any(h in _FSQ_ALIASES["user"] for h in head):
        for key, names in _FSQ_ALIASES.items():
            for j, h in enumerate(head):
                if h in names:
                    col[key] = j
                    break
        missing = [k for k in ("user", "venue", "utc") if k not in col]
        if missing:
            raise DataFormatError(f, 1, f"header lacks column(s) {', '.join(missing)}: {lines[0]!r}")
        start, ncols = 1, len(head)
        if len(lines) == 1:
            raise DataFormatError(f, 1, "the file has a header and no check-in rows")
    else:
        col = {"user": 0, "venue": 1, "utc": 2}
        start, ncols = 0, None
    users: list[str] = []
    venues: list[str] = []
    times: list[int] = []
    types: list[str] = []
    for k in range(start, len(lines)):
        ln = k + 1
        line = lines[k].rstrip("\r")
        if not line.strip():
            raise DataFormatError(f, ln, "empty line")
        parts = line.split("\t")
        if ncols is None:
            ncols = len(parts)
            if ncols < 3:
                raise DataFormatError(f, ln, f"expected tab-separated user, venue, utc_time, ..., found {line[:120]!r}")
        if len(parts) != ncols:
            raise DataFormatError(f, ln, f"expected {ncols} tab-separated fields, found {len(parts)}: {line[:120]!r}")
        u, v = parts[col["user"]].strip(), parts[col["venue"]].strip()
        if not u or not v:
            raise DataFormatError(f, ln, "empty user or venue id")
        try:
            t = _parse_fsq_time(parts[col["utc"]])
        except ValueError as exc:
            raise DataFormatError(f, ln, f"field 'utc': {parts[col['utc']]!r}: {exc}") from None
        if t < 0:
            raise DataFormatError(f, ln, f"field 'utc': {parts[col['utc']]!r} is before 1970")
        users.append(u)
        venues.append(v)
        times.append(t)
        if "category" in col:
            types.append(parts[col["category"]].strip())
    _refuse_two_spellings(f, users, start + 1)
    if all(_ID_INT_RE.fullmatch(s) for s in users):
        uarr = np.array([int(s) for s in users], dtype=np.int64)
    else:
        uarr = np.array(users)
    info: dict[str, Any] = {"format": "foursquare"}
    meta_ids = meta_cats = names = None
    labels: list[str | None] | None = None
    if types and categories is not None:
        labels, names, cat_info = _label_types(types, categories)
        first: dict[str, str | None] = {}
        conflicts = set()
        for v, lab in zip(venues, labels):
            old = first.setdefault(v, lab)
            if old != lab:
                conflicts.add(v)
        cat_info["venues_with_conflicting_type"] = len(conflicts)
        unmapped_venues = [v for v, lab in first.items() if lab is None]
        cat_info["unmapped"]["venues"] = len(unmapped_venues)
        info["categories"] = cat_info
        cidx = {n: j for j, n in enumerate(names)}
        mapped = [(v, lab) for v, lab in first.items() if lab is not None]
        meta_ids = np.array([v for v, _ in mapped], dtype=str)
        meta_cats = np.zeros((len(mapped), len(names)), dtype=bool)
        if mapped:
            meta_cats[np.arange(len(mapped)), [cidx[lab] for _, lab in mapped]] = True
    elif categories is not None:
        info["categories"] = {"mode": categories if isinstance(categories, str) else "mapping",
                              "note": "the file has no type column"}
    r = build_ratings(
        uarr, np.array(venues), np.ones(len(users), dtype=np.float32), np.array(times, dtype=np.int64),
        name=f"foursquare-{f.stem.lower()}", source=str(f), duplicates=duplicates,
        line_of=lambda row: start + 1 + int(row), item_meta_ids=meta_ids, item_meta_categories=meta_cats,
        category_names=names, info=info,
    )
    users_before = r.n_users
    if min_venues > 0:
        r = r.filter_users(min_venues)
        if r.n_users == 0:
            raise ValueError(f"{f}: no user has {min_venues} or more distinct venues (user_filter={rule!r})")
    out_info = dict(r.info)
    out_info["user_filter"] = {
        "rule": rule, "min_venues": min_venues, "users_before": users_before, "users_kept": r.n_users,
        "checkins_kept": len(r),
    }
    if r.categories is not None:
        no_cat = ~r.categories.any(axis=1)
        out_info["items_without_category"] = int(no_cat.sum())
        cat_info = dict(out_info["categories"])
        cat_info["unmapped"] = dict(cat_info["unmapped"], venues_kept=int(no_cat.sum()),
                                    checkins_kept=int(no_cat[r.items].sum()))
        out_info["categories"] = cat_info
        if cat_info["unmapped"]["venues"]:
            log.warning("%s: %d venues (%d check-ins) of %d type(s) have no category", f,
                        cat_info["unmapped"]["venues"], cat_info["unmapped"]["checkins"], cat_info["unmapped"]["n_types"])
    return Ratings._trusted(r.users, r.items, r.values, r.timestamps, like=r, info=out_info)


def _refuse_two_spellings(path: Path, users: list[str], first_line: int) -> None:
    """User ids ``007`` and ``7`` are one user when every id is a number (they become integers)
    and two when some id is not (they stay text): which one depended on the other rows, silently.
    A digit-only id with a leading zero beside another spelling of its integer is an error."""
    zeros = {s for s in set(users) if len(s) > 1 and s[0] == "0" and s.isascii() and s.isdigit()}
    if not zeros:
        return
    spelled: dict[int, tuple[str, int]] = {}
    for k, s in enumerate(users):
        if s.isascii() and s.isdigit():
            prev, prev_k = spelled.setdefault(int(s), (s, k))
            if prev != s:
                raise DataFormatError(
                    path, first_line + k,
                    f"user id {s!r} and {prev!r} (line {first_line + prev_k}) are the same number written two ways; "
                    "write user ids without leading zeros",
                )


def _label_types(types: list[str], categories: str | Mapping[str, str]):
    """(label per row or None, category names, info) for the chosen category mode."""
    if isinstance(categories, str):
        mode = categories
        cmap = category_map()
        source = f"fedsim/data/{CATEGORY_FILE}"
    else:
        mode = "mapping"
        cmap = {str(k): str(v) for k, v in categories.items()}
        source = "given mapping"
    resolve = _Resolver(cmap)
    by_raw: dict[str, str | None] = {}
    for t in set(types):
        name = resolve(t)
        if mode == "type":
            by_raw[t] = name if name is not None else t
        else:
            by_raw[t] = cmap[name] if name is not None else None
    labels = [by_raw[t] for t in types]
    if mode == "top":
        names = list(TOP_LEVEL_CATEGORIES)
    elif mode == "type":
        names = sorted({lab for lab in by_raw.values() if lab is not None})
    else:
        names = sorted(set(cmap.values()))
    unmapped: dict[str, int] = {}
    n_repaired = 0
    for t, lab in zip(types, labels):
        if lab is None:
            unmapped[t] = unmapped.get(t, 0) + 1
        elif t in resolve.repaired:
            n_repaired += 1
    info = {
        "mode": mode, "map": source, "repaired": dict(sorted(resolve.repaired.items())), "rows_repaired": n_repaired,
        "unmapped": {"types": dict(sorted(unmapped.items())), "n_types": len(unmapped),
                     "checkins": int(sum(unmapped.values()))},
    }
    if mode == "type":
        info["unrepaired"] = sorted(t for t in set(types) if resolve(t) is None and _MANGLED.search(t))
    return labels, names, info
