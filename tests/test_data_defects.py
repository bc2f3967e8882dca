"""Defects injected into rating files: every one loads correctly or raises DataFormatError naming
the file (and the line where there is one).  The four reproductions of the reliability issue come
first, then one parametrised sweep per loader."""

import time
import warnings

import numpy as np
import pytest

from fedsim.data import (
    DataFormatError,
    load_anime,
    load_csv,
    load_foursquare,
    load_movielens,
    load_netflix,
)

# ---------------------------------------------------------------------------------------------
# the reproductions


@pytest.mark.parametrize("content", [b"", b"\n", b"\n \n\r\n"])
def test_empty_ratings_file_names_the_file(tmp_path, content):
    """(1) An empty ratings file was 0 rows and failed later naming no file."""
    cases = {
        "ml-100k/u.data": lambda p: load_movielens(p.parent),
        "ml-1m/ratings.dat": lambda p: load_movielens(p.parent),
        "ml-20m/ratings.csv": lambda p: load_movielens(p.parent),
        "nf/mv_0000001.txt": lambda p: load_netflix(p.parent),
        "anime/rating.csv": lambda p: load_anime(p.parent),
        "fsq/Rome.tsv": load_foursquare,
        "csv/r.csv": load_csv,
        "tsv/r.tsv": lambda p: load_csv(p, sep="\t", header=False),
    }
    for rel, load in cases.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content)
        with pytest.raises(DataFormatError, match="empty file") as ei:
            load(p)
        assert ei.value.path == str(p) and ei.value.line is None, rel


@pytest.mark.parametrize(
    "rel, header, load",
    [
        ("ml-20m/ratings.csv", "userId,movieId,rating,timestamp", lambda p: load_movielens(p.parent)),
        ("nf/mv_0000001.txt", "1:", lambda p: load_netflix(p.parent)),
        ("anime/rating.csv", "user_id,anime_id,rating", lambda p: load_anime(p.parent)),
        ("fsq/Rome.tsv", "user_id\tvenue_id\ttype\tutc", load_foursquare),
        ("csv/r.csv", "user,item,rating", load_csv),
    ],
)
def test_header_only_names_file_and_line(tmp_path, rel, header, load):
    p = tmp_path / rel
    p.parent.mkdir(parents=True)
    p.write_text(header + "\n\n")
    with pytest.raises(DataFormatError) as ei:
        load(p)
    assert ei.value.path == str(p) and ei.value.line == 1
    assert "no rating" in str(ei.value) or "no check-in" in str(ei.value)


def test_id_of_10_to_the_20_is_a_format_error_with_line(tmp_path):
    """(2) An id of 10^20 raised OverflowError without file or line."""
    d = tmp_path / "ml-100k"
    d.mkdir()
    (d / "u.data").write_text("1\t2\t3\t881250949\n100000000000000000000\t2\t3\t881250949\n")
    with pytest.raises(DataFormatError, match="out of the 64-bit integer range") as ei:
        load_movielens(d)
    assert ei.value.path.endswith("u.data") and ei.value.line == 2
    f = tmp_path / "r.csv"
    f.write_text("u,i,r\n1,2,3\n4,100000000000000000000,3\n")
    with pytest.raises(DataFormatError, match="item id '100000000000000000000' is out of the 64-bit") as ei:
        load_csv(f)
    assert ei.value.line == 3
    f.write_text("u,i,r\n1,2,3\n1e20,2,3\n")
    with pytest.raises(DataFormatError, match="out of the 64-bit integer range") as ei:
        load_csv(f)
    assert ei.value.line == 3


def test_csv_integer_valued_ids_are_one_id(tmp_path):
    """(3) load_csv made ids 1 and 1.0 two users."""
    f = tmp_path / "r.csv"
    f.write_text("u,i,r\n1,10,3\n1.0,11,4\n+1,12,5\n2,10.0,1\n1e0,13,2\n")
    r = load_csv(f)
    assert r.n_users == 2 and r.user_ids.tolist() == [1, 2] and r.user_ids.dtype == np.int64
    assert r.item_ids.tolist() == [10, 11, 12, 13]
    assert r.users.tolist() == [0, 0, 0, 1, 0]
    assert r.info["ids"] == {"user": "int", "item": "int"}
    # a non-integer numeric id is an error naming the line
    f.write_text("u,i,r\n1,10,3\n1.5,11,4\n")
    with pytest.raises(DataFormatError, match=r"user id '1.5' is not an integer") as ei:
        load_csv(f)
    assert ei.value.line == 3
    # string ids are text; an integer spelled two ways among them is refused, not split in two
    f.write_text("u,i,r\nalice,10,3\n1,11,4\n1.0,12,5\n")
    with pytest.raises(DataFormatError, match=r"'1.0' and '1' \(line 3\) are the same integer") as ei:
        load_csv(f)
    assert ei.value.line == 4
    f.write_text("u,i,r\nalice,10,3\n007,11,4\n7,12,5\n1.5,13,2\n")
    r = load_csv(f)  # text ids: 007 and 7 are different strings, 1.5 is a string too
    assert r.user_ids.tolist() == ["007", "1.5", "7", "alice"]


def test_csv_declared_rating_scale(tmp_path):
    """(4) load_csv accepted ratings of 99 and -3."""
    f = tmp_path / "r.csv"
    f.write_text("u,i,r\n1,10,3\n2,11,99\n3,12,-3\n")
    with pytest.raises(DataFormatError, match=r"rating 99 outside the declared scale \[1, 5\]") as ei:
        load_csv(f)
    assert ei.value.line == 3 and ei.value.path == str(f)
    with pytest.raises(DataFormatError, match=r"rating -3 outside the declared scale \[-2, 100\]") as ei:
        load_csv(f, scale=(-2, 100))
    assert ei.value.line == 4
    r = load_csv(f, scale=None)
    assert r.values.tolist() == [3, 99, -3] and r.info["scale"] is None
    assert load_csv(f, scale=(-3, 99)).info["scale"] == (-3.0, 99.0)
    f.write_text("u,i,r\n1,10,0.5\n2,11,10\n")
    assert load_csv(f, scale=(0.5, 10)).values.tolist() == [0.5, 10]
    # implicit data ignores the scale; a bad scale is a usage error
    assert len(load_csv(f, rating_col=None)) == 2
    for bad in [(5, 1), (1,), "1-5", (1, float("inf"))]:
        with pytest.raises(ValueError, match="scale must be"):
            load_csv(f, scale=bad)


# ---------------------------------------------------------------------------------------------
# the sweep

T0 = 978300760  # 2000-12-31 22:12:40 UTC
BASE = [(10, 1, 3, T0), (11, 2, 4, T0 + 86400), (12, 1, 5, T0 + 2 * 86400), (13, 3, 2, T0 + 3 * 86400),
        (14, 2, 1, T0 + 4 * 86400)]
K = 2  # the row (0-based) that receives the defect


def _date(t):
    return time.strftime("%Y-%m-%d", time.gmtime(t)) if isinstance(t, int) else t


def _utc(t):
    return time.strftime("%a %b %d %H:%M:%S +0000 %Y", time.gmtime(t)) if isinstance(t, int) else t


FORMATS = {
    "ml-100k": dict(file="ml-100k/u.data", header=None, sep="\t", load=lambda p: load_movielens(p.parent),
                    row=lambda u, i, r, t: f"{u}\t{i}\t{r}\t{t}"),
    "ml-1m": dict(file="ml-1m/ratings.dat", header=None, sep="::", load=lambda p: load_movielens(p.parent),
                  row=lambda u, i, r, t: f"{u}::{i}::{r}::{t}"),
    "ml-20m": dict(file="ml-20m/ratings.csv", header="userId,movieId,rating,timestamp", sep=",",
                   load=lambda p: load_movielens(p.parent), row=lambda u, i, r, t: f"{u},{i},{r},{t}"),
    "netflix": dict(file="nf/mv_0000001.txt", header="1:", sep=",", load=lambda p: load_netflix(p.parent),
                    row=lambda u, i, r, t: f"{u},{r},{_date(t)}"),
    "anime": dict(file="anime/rating.csv", header="user_id,anime_id,rating", sep=",",
                  load=lambda p: load_anime(p.parent), row=lambda u, i, r, t: f"{u},{i},{r}"),
    "foursquare": dict(file="fsq/Rome.tsv", header="user_id\tvenue_id\ttype\tutc", sep="\t",
                       load=lambda p: load_foursquare(p, user_filter=None),
                       row=lambda u, i, r, t: f"{u}\tv{i}\tPlaza\t{_utc(t)}"),
    "csv": dict(file="csv/r.csv", header="user,item,rating,time", sep=",",
                load=lambda p: load_csv(p, time_col="time"), row=lambda u, i, r, t: f"{u},{i},{r},{t}"),
}
NO_RATING = {"foursquare"}
NO_TIME = {"anime"}


def _field(k, **over):
    u, i, r, t = BASE[k]
    return over.get("u", u), over.get("i", i), over.get("r", r), over.get("t", t)


def _rows(fmt, k=None, **over):
    spec = FORMATS[fmt]
    return [spec["row"](*_field(j, **(over if j == k else {}))) for j in range(len(BASE))]


def _file(fmt, rows, *, header=True):
    spec = FORMATS[fmt]
    lines = ([spec["header"]] if spec["header"] and header else []) + rows
    return ("\n".join(lines) + "\n").encode()


def _hl(fmt):
    return 1 if FORMATS[fmt]["header"] else 0


# Each defect: (name, build(fmt) -> bytes, expected(fmt) -> line number, "ok" or None to skip)
def _sub_field(**over):
    return lambda fmt: _file(fmt, _rows(fmt, K, **over))


def _line_k(fmt):
    return _hl(fmt) + K + 1


def _truncated(fmt):
    rows = _rows(fmt)
    sep = FORMATS[fmt]["sep"]
    last = rows[-1]
    rows[-1] = last[: last.index(sep, last.index(sep) + len(sep)) + len(sep)]
    return _file(fmt, rows)[:-1]  # no final newline either


def _extra_field(fmt):
    rows = _rows(fmt)
    rows[K] += FORMATS[fmt]["sep"] + "9"
    return _file(fmt, rows)


def _missing_field(fmt):
    rows = _rows(fmt)
    sep = FORMATS[fmt]["sep"]
    rows[K] = rows[K][: rows[K].rindex(sep)]
    return _file(fmt, rows)


def _duplicate(fmt):
    u, i, r, t = BASE[0]
    rows = _rows(fmt)
    rows[K] = FORMATS[fmt]["row"](u, i, 4, t + 7 * 86400)
    return _file(fmt, rows)


def _blank_middle(fmt):
    rows = _rows(fmt)
    rows.insert(K, "")
    return _file(fmt, rows)


def _bytes_in_row(fmt, field, bad=b"\xe9"):
    marker = {"u": "777777", "r": "7", "i": "777777"}[field]
    data = _file(fmt, _rows(fmt, K, **{field: marker}))
    lines = data.split(b"\n")
    lines[_hl(fmt) + K] = lines[_hl(fmt) + K].replace(marker.encode(), bad, 1)
    return b"\n".join(lines)


def _negative_time(fmt):
    return _file(fmt, _rows(fmt, K, t=-5))


DEFECTS = {
    # name: (build, expected line or "ok", formats where it does not apply)
    "truncated_last_line": (_truncated, lambda fmt: _hl(fmt) + len(BASE), ()),
    "extra_field": (_extra_field, _line_k, ()),
    "missing_field": (_missing_field, _line_k, ()),
    "rating_text": (_sub_field(r="x"), _line_k, NO_RATING),
    "rating_empty": (_sub_field(r=""), _line_k, NO_RATING),
    "rating_nan": (_sub_field(r="nan"), _line_k, NO_RATING),
    "rating_inf": (_sub_field(r="inf"), _line_k, NO_RATING),
    "rating_1e400": (_sub_field(r="1e400"), _line_k, NO_RATING),
    "rating_99": (_sub_field(r="99"), _line_k, NO_RATING),
    "rating_negative": (_sub_field(r="-3"), _line_k, NO_RATING),
    "rating_zero": (_sub_field(r="0"), _line_k, NO_RATING),
    "time_negative": (_negative_time, _line_k, NO_TIME),
    "time_text": (_sub_field(t="soon"), _line_k, NO_TIME),
    "user_10e20": (_sub_field(u="100000000000000000000"), _line_k, {"foursquare"}),  # string ids there
    "item_10e20": (_sub_field(i="100000000000000000000"), _line_k, {"foursquare", "netflix"}),
    "user_negative": (_sub_field(u="-4"), _line_k, {"foursquare", "csv"}),  # ids with no rule there
    "user_empty": (_sub_field(u=""), _line_k, ()),
    "duplicate_pair": (_duplicate, _line_k, ()),
    "blank_line_inside": (_blank_middle, _line_k, ()),
    "non_utf8_in_rating": (lambda fmt: _bytes_in_row(fmt, "r"), _line_k, NO_RATING),
    "non_utf8_in_user": (lambda fmt: _bytes_in_row(fmt, "u"), _line_k, ()),
    "bom": (lambda fmt: b"\xef\xbb\xbf" + _file(fmt, _rows(fmt)), lambda fmt: "ok", ()),
    "crlf": (lambda fmt: _file(fmt, _rows(fmt)).replace(b"\n", b"\r\n"), lambda fmt: "ok", ()),
    "trailing_blank_lines": (lambda fmt: _file(fmt, _rows(fmt)) + b"\n\n \r\n\t\n", lambda fmt: "ok", ()),
    "no_final_newline": (lambda fmt: _file(fmt, _rows(fmt))[:-1], lambda fmt: "ok", ()),
    "bom_crlf_trailing": (lambda fmt: b"\xef\xbb\xbf" + _file(fmt, _rows(fmt)).replace(b"\n", b"\r\n") + b"\r\n\r\n",
                          lambda fmt: "ok", ()),
}

CASES = [(fmt, d) for fmt in FORMATS for d, (_, _, skip) in DEFECTS.items() if fmt not in skip]


def _write(tmp_path, fmt, data):
    p = tmp_path / FORMATS[fmt]["file"]
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return p


def test_clean_files_load(tmp_path):
    for fmt in FORMATS:
        r = FORMATS[fmt]["load"](_write(tmp_path / "clean", fmt, _file(fmt, _rows(fmt))))
        assert len(r) == len(BASE), fmt


@pytest.mark.parametrize("fmt, defect", CASES, ids=[f"{f}-{d}" for f, d in CASES])
def test_injected_defect(tmp_path, fmt, defect):
    build, expected, _ = DEFECTS[defect]
    load = FORMATS[fmt]["load"]
    want = expected(fmt)
    p = _write(tmp_path, fmt, build(fmt))
    if want == "ok":
        clean = load(_write(tmp_path / "clean", fmt, _file(fmt, _rows(fmt))))
        got = load(p)
        assert got.fingerprint() == clean.fingerprint()
        return
    with pytest.raises(DataFormatError) as ei:
        load(p)
    err = ei.value
    assert err.path == str(p), f"{fmt}/{defect}: {err}"
    assert err.line == want, f"{fmt}/{defect}: {err}"
    assert str(err).startswith(f"{p}, line {want}: ")


def test_foursquare_latin1_type_needs_the_encoding(tmp_path):
    p = tmp_path / "Rome.tsv"
    rows = _rows("foursquare")
    data = _file("foursquare", rows).replace(b"Plaza", b"Caf\xe9", 1)
    p.write_bytes(data)
    with pytest.raises(DataFormatError, match="not valid utf-8; pass encoding='latin-1'") as ei:
        load_foursquare(p, user_filter=None)
    assert ei.value.line == 2
    r = load_foursquare(p, user_filter=None, encoding="latin-1", categories="type")
    assert r.category_names == ["Café", "Plaza"]


def test_foursquare_impossible_times(tmp_path):
    p = tmp_path / "Rome.tsv"
    for utc, msg in [
        ("Fri Feb 30 10:00:00 +0000 2012", "impossible date"),
        ("Wed Apr 03 18:07:30 +0000 2012", "2012-04-03 is a Tue, not a Wed"),
        ("Tue Apr 03 25:07:30 +0000 2012", "impossible time 25:07:30"),
        ("Sun Apr 03 18:07:30 +0000 12012", "not like"),
        ("Tue Apr 03 18:07 +0000 2012", "not like"),
        ("Tue Apr 03 18:07:30 UTC 2012", "not like"),
    ]:
        p.write_text("user_id\tvenue_id\ttype\tutc\n1\tv1\tPlaza\tTue Apr 03 18:07:30 +0000 2012\n"
                     f"1\tv2\tPlaza\t{utc}\n")
        with pytest.raises(DataFormatError, match=msg) as ei:
            load_foursquare(p, user_filter=None)
        assert ei.value.line == 3


def test_netflix_bom_and_crlf_per_segment(tmp_path):
    (tmp_path / "combined_data_1.txt").write_bytes(
        b"\xef\xbb\xbf1:\r\n10,3,2005-09-06\r\n11,5,2005-05-13\r\n2:\r\n10,2,2005-09-07\r\n\r\n")
    r = load_netflix(tmp_path)
    assert len(r) == 3 and r.items.tolist() == [0, 0, 1]


def test_netflix_big_movie_and_customer_ids(tmp_path):
    f = tmp_path / "combined_data_1.txt"
    f.write_text("1:\n10,3,2005-09-06\n99999999999:\n10,3,2005-09-06\n")
    with pytest.raises(DataFormatError, match="movie id 99999999999 outside") as ei:
        load_netflix(tmp_path)
    assert ei.value.line == 3
    f.write_text("1:\n10,3,2005-09-06\n3000000000,3,2005-09-06\n")
    with pytest.raises(DataFormatError, match="customer id 3000000000 exceeds") as ei:
        load_netflix(tmp_path)
    assert ei.value.line == 3


def test_anime_all_unrated_with_drop_names_the_file(tmp_path):
    d = tmp_path / "anime"
    d.mkdir()
    (d / "rating.csv").write_text("user_id,anime_id,rating\n1,20,-1\n2,20,-1\n")
    with pytest.raises(DataFormatError, match="all 2 ratings are -1") as ei:
        load_anime(d)
    assert ei.value.path.endswith("rating.csv")
    assert len(load_anime(d, unrated="implicit")) == 2


def test_empty_metadata_files_are_errors(tmp_path):
    d = tmp_path / "ml-100k"
    d.mkdir()
    (d / "u.data").write_text("1\t2\t3\t881250949\n")
    (d / "u.item").write_text("")
    with pytest.raises(DataFormatError, match="u.item: empty file"):
        load_movielens(d)
    assert load_movielens(d, genres=False).categories is None
    d = tmp_path / "ml-20m"
    d.mkdir()
    (d / "ratings.csv").write_text("userId,movieId,rating,timestamp\n1,2,3.5,1112486027\n")
    (d / "movies.csv").write_text("movieId,title,genres\n")
    with pytest.raises(DataFormatError, match="movies.csv, line 1: the file has a header and no movies"):
        load_movielens(d)


def test_csv_times(tmp_path):
    f = tmp_path / "r.csv"
    f.write_text("u,i,r,t\n1,2,3,1112486027\n1,3,3,1112486028.0\n2,2,4,2005-04-03T00:13:47\n")
    r = load_csv(f, time_col="t")
    assert r.timestamps.tolist() == [1112486027, 1112486028, 1112487227]
    f.write_text("u,i,r,t\n1,2,3,1112486027\n1,3,3,1112486027.5\n")
    with pytest.raises(DataFormatError, match="fractional epoch seconds") as ei:
        load_csv(f, time_col="t")
    assert ei.value.line == 3
    f.write_text("u,i,r,t\n1,2,3,1969-12-31T23:59:59\n")
    with pytest.raises(DataFormatError, match="before 1970") as ei:
        load_csv(f, time_col="t")
    assert ei.value.line == 2
    f.write_text("u,i,r,t\n1,2,3,NaT\n")
    with pytest.raises(DataFormatError, match="neither epoch seconds nor ISO 8601"):
        load_csv(f, time_col="t")


@pytest.mark.parametrize(
    "t, msg",
    [
        ("now", "neither epoch seconds nor ISO 8601"),  # numpy reads these as the wall clock
        ("today", "neither epoch seconds nor ISO 8601"),
        ("NOW", "neither epoch seconds nor ISO 8601"),
        ("+2005-04-03", "neither epoch seconds nor ISO 8601"),
        ("12005-04-03", "neither epoch seconds nor ISO 8601"),
        ("2005-04-03TZ00:13", "neither epoch seconds nor ISO 8601"),
        ("2005-02-30", "neither epoch seconds nor ISO 8601"),
        ("2005-04-03T24:00", "neither epoch seconds nor ISO 8601"),
        ("2005-04-03T00:13:47.9", "fractional seconds"),  # was truncated to :47
        ("2005-04-03 00:13:47.000001Z", "fractional seconds"),
        ("2005-04-03T00:13:47.5+01:00", "fractional seconds"),
    ],
)
def test_csv_times_refused_name_file_and_line(tmp_path, t, msg):
    f = tmp_path / "r.csv"
    f.write_text(f"u,i,r,t\n1,2,3,1112486027\n1,3,3,{t}\n")
    with pytest.raises(DataFormatError, match=msg) as ei:
        load_csv(f, time_col="t")
    assert ei.value.path == str(f) and ei.value.line == 3 and repr(t) in str(ei.value)


def test_csv_iso_times_whole_seconds_and_reduced_forms(tmp_path):
    f = tmp_path / "r.csv"
    times = ["2005-04-03T00:13:47.000", "2005-04-03 00:13:47.0Z", "2005-04-03", "2005-04", "2005-04-03T00:13",
             "2005-04-03T00"]
    f.write_text("u,i,r,t\n" + "".join(f"1,{k},3,{t}\n" for k, t in enumerate(times)))
    r = load_csv(f, time_col="t")
    assert r.timestamps.tolist() == [1112487227, 1112487227, 1112486400, 1112313600, 1112487180, 1112486400]
    f.write_text("u,i,r,t\n1,2,3,2005-04-03T01:13:47+01:00\n1,3,3,2005-04-02T19:13:47-0500\n")
    with warnings.catch_warnings():
        # the offset is applied by load_csv, not handed to datetime64 (whose parsing of one is deprecated,
        # a DeprecationWarning; this ignored every warning)
        warnings.simplefilter("error")
        assert load_csv(f, time_col="t").timestamps.tolist() == [1112487227, 1112487227]
