"""Every loader on small files written in the exact official formats, including malformed lines."""

import numpy as np
import pytest

from fedsim.data import (
    DataFormatError,
    load_anime,
    load_csv,
    load_movielens,
    load_netflix,
    netflix_subset,
)
from fedsim.data._parse import parse_numeric

# ---------------------------------------------------------------------------------------------
# MovieLens 100K

U_DATA = "196\t242\t3\t881250949\n186\t302\t3\t891717742\n22\t377\t1\t878887116\n196\t302\t5\t881251000\n"
GENRES = [
    "unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary", "Drama",
    "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller", "War", "Western",
]


def u_item_line(mid, title, flags):
    f = ["0"] * 19
    for g in flags:
        f[GENRES.index(g)] = "1"
    return f"{mid}|{title}|01-Jan-1995||http://us.imdb.com/M/title-exact?x|" + "|".join(f)


def write_ml100k(d, data=U_DATA, items=True):
    d.mkdir(parents=True, exist_ok=True)
    (d / "u.data").write_text(data)
    if items:
        (d / "u.genre").write_text("".join(f"{g}|{k}\n" for k, g in enumerate(GENRES)) + "\n")
        lines = [
            u_item_line(242, "Kolya (1996)", ["Comedy"]),
            u_item_line(302, "L.A. Confidential (1997)", ["Crime", "Film-Noir", "Mystery", "Thriller"]),
            u_item_line(377, "Heavyweights (1994)", ["Children's", "Comedy"]),
            u_item_line(500, "Never rated (1990)", ["Drama"]),
        ]
        (d / "u.item").write_bytes(("\n".join(lines) + "\n").encode("latin-1"))
    return d


def test_ml100k_counts_ids_values(tmp_path):
    r = load_movielens(write_ml100k(tmp_path / "ml-100k"))
    assert r.name == "ml-100k" and len(r) == 4
    assert r.n_users == 3 and r.user_ids.tolist() == [22, 186, 196]
    assert r.n_items == 3 and r.item_ids.tolist() == [242, 302, 377]
    # rows in file order, dense indices in id order
    assert r.users.tolist() == [2, 1, 0, 2]
    assert r.items.tolist() == [0, 1, 2, 1]
    assert r.values.tolist() == [3, 3, 1, 5]
    assert r.timestamps.tolist() == [881250949, 891717742, 878887116, 881251000]
    assert r.category_names == GENRES and r.categories.shape == (3, 19)
    assert r.categories[1].nonzero()[0].tolist() == [GENRES.index(g) for g in ("Crime", "Film-Noir", "Mystery", "Thriller")]
    assert r.info["duplicates"]["pairs"] == 0
    # the file path works as well as the folder
    r2 = load_movielens(tmp_path / "ml-100k" / "u.data")
    assert r2.fingerprint() == r.fingerprint()


def test_ml100k_item_space_id_range(tmp_path):
    r = load_movielens(write_ml100k(tmp_path / "ml-100k"), item_space="id_range")
    assert r.n_items == 377 and r.item_ids[0] == 1 and r.item_ids[-1] == 377
    assert r.items.tolist() == [241, 301, 376, 301]
    assert r.categories.shape == (377, 19)
    assert r.categories[241, GENRES.index("Comedy")] and not r.categories[0].any()
    assert r.info["items_without_category"] == 374


@pytest.mark.parametrize(
    "body, line, msg",
    [
        ("1\t2\t3\t4\n1\t3\t4\n", 2, "expected 4 fields"),
        ("1\t2\t3\t4\n1\t3\tx\t4\n", 2, "field 'rating': 'x' is not a number"),
        ("1\t2\t3\t4\n1\t3.5\t4\t4\n", 2, "field 'item': '3.5' is not an integer"),
        ("1\t2\t3\t4\n\n1\t3\t4\t4\n", 2, "empty line"),
        ("1\t2\t3\t4\n1\t3\t4\t4\n2\t2\t6\t5\n", 3, "rating 6 outside"),
        ("1\t2\t3\t4\n1\t0\t4\t4\n", 2, "movie id 0 must be >= 1"),
        ("1\t2\t3\t4\n1\t2\t\t4\n", 2, "field 'rating': empty"),
        ("1\t2\t3\t4\n1\t3\tnan\t4\n", 2, "not a number"),
        ("1\t2\t3\t4\t\n", 1, "expected 4 fields"),
    ],
)
def test_ml100k_malformed_lines(tmp_path, body, line, msg):
    d = write_ml100k(tmp_path / "ml-100k", data=body, items=False)
    with pytest.raises(DataFormatError, match=msg) as ei:
        load_movielens(d)
    assert ei.value.line == line
    assert ei.value.path.endswith("u.data")
    assert f"u.data, line {line}:" in str(ei.value)


def test_ml100k_bad_u_item(tmp_path):
    d = write_ml100k(tmp_path / "ml-100k")
    (d / "u.item").write_text("1|Toy Story|x|0|0\n")
    with pytest.raises(DataFormatError, match="u.item, line 1: expected 24"):
        load_movielens(d)
    assert load_movielens(d, genres=False).categories is None


def test_duplicates_policies(tmp_path):
    body = "1\t10\t1\t100\n2\t10\t2\t100\n1\t10\t4\t300\n1\t11\t5\t100\n1\t10\t3\t200\n"
    d = write_ml100k(tmp_path / "ml-100k", data=body, items=False)
    with pytest.raises(DataFormatError, match=r"duplicate rating for user 1, item 10 \(lines 1 and 3\)") as ei:
        load_movielens(d)
    assert ei.value.line == 3 and "1 duplicated (user, item) pairs (2 extra rows)" in str(ei.value)
    assert "keep_last" in str(ei.value)

    last = load_movielens(d, duplicates="keep_last")
    assert len(last) == 3 and last.info["duplicates"] == {"policy": "keep_last", "pairs": 1, "rows_removed": 2}
    # rows in file order; the (1,10) row kept is the last one (line 5)
    assert last.values.tolist() == [2, 5, 3] and last.timestamps.tolist() == [100, 100, 200]
    first = load_movielens(d, duplicates="keep_first")
    assert first.values.tolist() == [1, 2, 5]
    mean = load_movielens(d, duplicates="mean")
    assert mean.values.tolist() == pytest.approx([8 / 3, 2, 5])
    assert mean.timestamps.tolist() == [300, 100, 100]  # latest timestamp of the group
    with pytest.raises(ValueError, match="duplicates must be one of"):
        load_movielens(d, duplicates="drop")


# ---------------------------------------------------------------------------------------------
# MovieLens 1M / 10M (::)

ML1M_RATINGS = "1::1193::5::978300760\n1::661::3::978302109\n2::1193::4::978298413\n3::3952::1::978297000\n"
ML1M_MOVIES = "1193::One Flew Over the Cuckoo's Nest (1975)::Drama\n661::James and the Giant Peach (1996)::Animation|Children's|Musical\n3952::Contender, The (2000)::Drama|Thriller\n"


def test_ml1m(tmp_path):
    d = tmp_path / "ml-1m"
    d.mkdir()
    (d / "ratings.dat").write_text(ML1M_RATINGS)
    (d / "movies.dat").write_bytes(ML1M_MOVIES.encode("latin-1"))
    r = load_movielens(d)
    assert r.name == "ml-1m" and len(r) == 4 and r.n_users == 3
    assert r.item_ids.tolist() == [661, 1193, 3952]
    assert r.values.tolist() == [5, 3, 4, 1]
    assert r.category_names == ["Animation", "Children's", "Drama", "Musical", "Thriller"]
    assert r.categories.tolist() == [[1, 1, 0, 1, 0], [0, 0, 1, 0, 0], [0, 0, 1, 0, 1]]
    rr = load_movielens(d, item_space="id_range")
    assert rr.n_items == 3952 and rr.items.tolist() == [1192, 660, 1192, 3951]


@pytest.mark.parametrize(
    "body, line, msg",
    [
        ("1::1193::5::978300760\n1::661:3::978302109\n", 2, "expected 4 fields"),
        ("1::1193::5::978300760\n1::661::3\n", 2, "expected 4 fields"),
        ("1::1193::5::978300760\n1::661::3::97830x109\n", 2, "'timestamp': '97830x109' is not an integer"),
        ("1::1193::5::978300760\n1\t661::3::1\n", 2, "expected 4 fields"),
    ],
)
def test_ml1m_malformed(tmp_path, body, line, msg):
    d = tmp_path / "ml-1m"
    d.mkdir()
    (d / "ratings.dat").write_text(body)
    with pytest.raises(DataFormatError, match=msg) as ei:
        load_movielens(d)
    assert ei.value.line == line and "ratings.dat" in ei.value.path


def test_ml10m_half_stars_and_variant_check(tmp_path):
    d = tmp_path / "ml-10m" / "ml-10M100K"
    d.mkdir(parents=True)
    (d / "ratings.dat").write_text("1::122::5::838985046\n1::185::4.5::838983525\n2::122::0.5::838983392\n")
    r = load_movielens(tmp_path / "ml-10m")  # parent folder holding the dataset folder
    assert r.name == "ml-10m" and r.values.tolist() == [5, 4.5, 0.5]
    with pytest.raises(ValueError, match="stored as 'csv'"):
        load_movielens(d, variant="20m")
    with pytest.raises(DataFormatError, match="rating 0.5 outside"):
        load_movielens(d, variant="1m")  # 1M ratings are 1..5


# characters str.splitlines() breaks at besides '\n' and '\r'
ODD_BREAKS = ["\x85", "\u2028", "\u2029", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]


def test_movies_dat_splits_lines_at_newlines_only(tmp_path):
    d = tmp_path / "ml-1m"
    d.mkdir()
    (d / "ratings.dat").write_text(ML1M_RATINGS)
    # a cp1252 ellipsis (0x85) makes the file Latin-1, where it reads as U+0085
    (d / "movies.dat").write_bytes(ML1M_MOVIES.replace("Peach", "Peach\x85").encode("latin-1"))
    assert load_movielens(d).category_names == ["Animation", "Children's", "Drama", "Musical", "Thriller"]
    for ch in ODD_BREAKS[1:]:
        (d / "movies.dat").write_text(f"1193::A{ch}B (1975)::Drama\r\n661::X::Animation\r\n3952::bad\r\n", encoding="utf-8")
        with pytest.raises(DataFormatError, match=r"expected 3 fields \(movie id, title, genres\) separated by '::', "
                           r"found 2: '3952::bad'") as ei:
            load_movielens(d)
        assert ei.value.line == 3, repr(ch)


def test_u_item_and_u_genre_split_lines_at_newlines_only(tmp_path):
    d = write_ml100k(tmp_path / "ml-100k")
    good = (d / "u.item").read_bytes().decode("latin-1").split("\n")[:-1]
    odd = [good[0].replace("Kolya", "Kolya\x85\x0c")] + good[1:]
    (d / "u.item").write_bytes(("\r\n".join(odd) + "\r\n").encode("latin-1"))
    r = load_movielens(d)
    assert r.categories.shape == (3, 19) and r.categories[0].nonzero()[0].tolist() == [GENRES.index("Comedy")]
    (d / "u.item").write_bytes(("\n".join(odd[:2] + ["9|bad"]) + "\n").encode("latin-1"))
    with pytest.raises(DataFormatError, match="u.item, line 3: expected 24"):
        load_movielens(d)
    write_ml100k(d)
    names = ["un\u2028known"] + GENRES[1:]
    (d / "u.genre").write_text("".join(f"{g}|{k}\r\n" for k, g in enumerate(names)), encoding="utf-8")
    assert load_movielens(d).category_names == names
    (d / "u.genre").write_text("".join(f"{g}|{k}\n" for k, g in enumerate(names)) + "bad\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"u.genre, line 20: expected 2 fields \(genre, index\) separated by "
                       r"'\|', found 1: 'bad'"):
        load_movielens(d)


@pytest.mark.parametrize("line, found", [
    ("3952::Contender, The (2000)::2000::Drama|Thriller", 4),  # its last field became the genres
    ("3952::Contender, The::(2000)::Drama|Thriller", 4),
    ("3952::Contender, The (2000)::Drama::", 4),  # the genres were '' (none)
])
def test_a_movies_dat_line_with_a_field_too_many_is_an_error_naming_file_and_line(tmp_path, line, found):
    d = tmp_path / "ml-1m"
    d.mkdir()
    (d / "ratings.dat").write_text(ML1M_RATINGS)
    lines = ML1M_MOVIES.split("\n")
    (d / "movies.dat").write_text("\n".join(lines[:2] + [line]) + "\n")
    with pytest.raises(DataFormatError) as ei:
        load_movielens(d)
    assert (ei.value.path, ei.value.line) == (str(d / "movies.dat"), 3)
    assert ei.value.reason == (f"expected 3 fields (movie id, title, genres) separated by '::', found {found}: "
                               f"{line!r}")


def test_a_u_genre_line_with_a_field_too_many_is_an_error_naming_file_and_line(tmp_path):
    # 'Film|Noir|10' was read as the genre 'Film|Noir', silently
    d = write_ml100k(tmp_path / "ml-100k")
    names = list(GENRES)
    rows = [f"{g}|{k}" for k, g in enumerate(names)]
    rows[10] = "Film|Noir|10"
    (d / "u.genre").write_text("\n".join(rows) + "\n\n")
    with pytest.raises(DataFormatError) as ei:
        load_movielens(d)
    assert (ei.value.path, ei.value.line) == (str(d / "u.genre"), 11)
    assert ei.value.reason == "expected 2 fields (genre, index) separated by '|', found 3: 'Film|Noir|10'"
    rows[10] = "Film-Noir|x"
    (d / "u.genre").write_text("\n".join(rows) + "\n")
    with pytest.raises(DataFormatError, match=r"u.genre, line 11: field 'index': 'x' is not an integer$"):
        load_movielens(d)


def test_genre_files_may_start_with_a_bom(tmp_path):
    bom = b"\xef\xbb\xbf"
    d = write_ml100k(tmp_path / "ml-100k")
    plain = load_movielens(d)
    for name in ("u.genre", "u.item"):
        (d / name).write_bytes(bom + (d / name).read_bytes())
    r = load_movielens(d)
    assert r.category_names == GENRES  # not '\ufeffunknown'
    assert r.categories.tolist() == plain.categories.tolist()
    d = tmp_path / "ml-1m"
    d.mkdir()
    (d / "ratings.dat").write_text(ML1M_RATINGS)
    (d / "movies.dat").write_bytes(bom + ML1M_MOVIES.encode("latin-1"))
    assert load_movielens(d).categories.tolist() == [[1, 1, 0, 1, 0], [0, 0, 1, 0, 0], [0, 0, 1, 0, 1]]
    (d / "movies.dat").write_bytes(bom + b"\n")
    with pytest.raises(DataFormatError, match="empty file"):
        load_movielens(d)


def test_parse_numeric_chunks_report_exact_line(tmp_path):
    lines = [f"{u}\t{u % 7 + 1}\t{u % 5 + 1}\t{1000 + u}\n" for u in range(1, 2001)]
    lines[1733] = "1734\t5\t3\n"
    data = "".join(lines).encode()
    cols = [("user", "int"), ("item", "int"), ("rating", "float"), ("timestamp", "int")]
    with pytest.raises(DataFormatError) as ei:
        parse_numeric(tmp_path / "f", data, sep="\t", columns=cols, chunk_bytes=1000)
    assert ei.value.line == 1734
    good = "".join(x if k != 1733 else "1734\t5\t3\t9\n" for k, x in enumerate(lines)).encode()
    out = parse_numeric(tmp_path / "f", good, sep="\t", columns=cols, chunk_bytes=1000)
    assert len(out[0]) == 2000 and out[0][-1] == 2000 and out[3][1733] == 9


# ---------------------------------------------------------------------------------------------
# MovieLens 20M / 25M / latest (csv)


def write_ml_csv(d, ratings=None):
    d.mkdir(parents=True, exist_ok=True)
    (d / "ratings.csv").write_text(
        ratings
        if ratings is not None
        else "userId,movieId,rating,timestamp\n1,2,3.5,1112486027\n1,29,3.5,1112484676\n2,2,4.0,974820889\n"
    )
    (d / "movies.csv").write_text(
        "movieId,title,genres\n"
        "2,Jumanji (1995),Adventure|Children|Fantasy\n"
        '29,"City of Lost Children, The (Cité des enfants perdus, La) (1995)",Adventure|Drama|Fantasy|Mystery|Sci-Fi\n'
        "31,Dangerous Minds (1995),(no genres listed)\n"
    )
    return d


def test_ml20m_csv(tmp_path):
    r = load_movielens(write_ml_csv(tmp_path / "ml-20m"))
    assert r.name == "ml-20m" and len(r) == 3
    assert r.user_ids.tolist() == [1, 2] and r.item_ids.tolist() == [2, 29]
    assert r.values.tolist() == [3.5, 3.5, 4.0]
    assert r.category_names == ["Adventure", "Children", "Drama", "Fantasy", "Mystery", "Sci-Fi"]
    assert r.categories[1].tolist() == [1, 0, 1, 1, 1, 1]
    r2 = load_movielens(write_ml_csv(tmp_path / "ml-latest-small"))
    assert r2.name == "ml-latest-small"


def test_ml_csv_bad_header_and_line(tmp_path):
    d = write_ml_csv(tmp_path / "ml-20m", "user,movie,rating,timestamp\n1,2,3,4\n")
    with pytest.raises(DataFormatError, match="line 1: expected header") as ei:
        load_movielens(d)
    assert ei.value.line == 1
    d = write_ml_csv(tmp_path / "ml-25m", "userId,movieId,rating,timestamp\n1,2,3,4\n1,3,3;4\n")
    with pytest.raises(DataFormatError, match="line 3: expected 4 fields"):
        load_movielens(d)


def test_movielens_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="no MovieLens ratings file"):
        load_movielens(tmp_path)
    with pytest.raises(FileNotFoundError):
        load_movielens(tmp_path / "nope")


# ---------------------------------------------------------------------------------------------
# Netflix Prize


def write_netflix(d):
    ts = d / "training_set"
    ts.mkdir(parents=True)
    (ts / "mv_0000001.txt").write_text("1:\n1488844,3,2005-09-06\n822109,5,2005-05-13\n885013,4,2005-10-19\n")
    (ts / "mv_0000002.txt").write_text("2:\n1488844,2,2005-09-07\n885013,5,2004-02-29\n")
    (ts / "mv_0000003.txt").write_text("3:\n1488844,1,2000-01-01\n")
    return d


def test_netflix_per_movie_files(tmp_path):
    r = load_netflix(write_netflix(tmp_path / "nf"))
    assert r.name == "netflix" and len(r) == 6
    assert r.user_ids.tolist() == [822109, 885013, 1488844]
    assert r.item_ids.tolist() == [1, 2, 3]
    assert r.values.tolist() == [3, 5, 4, 2, 5, 1]
    assert r.users.tolist() == [2, 0, 1, 2, 1, 2]
    assert r.timestamps[0] == 1125964800  # 2005-09-06T00:00:00Z
    assert r.timestamps[4] == 1078012800  # 2004-02-29 (leap day)
    assert r.info["files"] == 3


def test_netflix_combined_file(tmp_path):
    f = tmp_path / "combined_data_1.txt"
    f.write_text("1:\n10,3,2005-09-06\n11,5,2005-05-13\n2:\n10,2,2005-09-07\n")
    r = load_netflix(tmp_path)
    assert len(r) == 3 and r.items.tolist() == [0, 0, 1] and r.users.tolist() == [0, 1, 0]
    assert load_netflix(tmp_path, timestamps=False).timestamps is None


@pytest.mark.parametrize(
    "text, line, msg",
    [
        ("1:\n10,3,2005-09-06\n11,5,2005-02-30\n", 3, "invalid date 2005-02-30"),
        ("1:\n10,3,2005-09-06\n11,5\n", 3, "expected 'CustomerID,Rating,Date'"),
        ("1:\n10,3,2005-09-06\n11,x,2005-09-06\n", 3, "'rating': 'x' is not an integer"),
        ("1:\n10,3,2005-09-06\n11,6,2005-09-06\n", 3, "rating 6 outside"),
        ("1:\n10,3,2005-09-06\n11,3,05-9-6\n", 3, "is not YYYY-MM-DD"),
        ("10,3,2005-09-06\n", 1, "expected a 'MovieID:' line first"),
        ("1:\n10,3,2005-09-06\n\n11,3,2005-09-06\n", 3, "empty line"),  # trailing blank lines are fine
    ],
)
def test_netflix_malformed(tmp_path, text, line, msg):
    f = tmp_path / "mv_0000001.txt"
    f.write_text(text)
    with pytest.raises(DataFormatError, match=msg) as ei:
        load_netflix(tmp_path)
    assert ei.value.line == line and ei.value.path.endswith("mv_0000001.txt")


def test_netflix_duplicate_across_segments_names_file_and_line(tmp_path):
    (tmp_path / "combined_data_1.txt").write_text("1:\n10,3,2005-09-06\n2:\n10,2,2005-09-07\n1:\n10,4,2005-09-08\n")
    with pytest.raises(DataFormatError, match="duplicate rating for user 10, item 1") as ei:
        load_netflix(tmp_path)
    assert ei.value.line == 6
    r = load_netflix(tmp_path, duplicates="keep_last")
    assert len(r) == 2 and r.info["duplicates"]["rows_removed"] == 1


NF_VALID = "1:\n1488844,3,2005-09-06\n822109,5,2005-05-13\n2:\n10,2,2004-02-29\n007,1,1999-12-31"


def _netflix_outcome(d):
    try:
        r = load_netflix(d)
    except DataFormatError as e:
        return "error", str(e), e.line
    return "ok", r.fingerprint(), r.timestamps.tolist()


def test_netflix_fast_path_taken_on_valid_files(tmp_path, monkeypatch):
    from fedsim.data import loaders

    assert loaders._fixed_width_dates(b"1488844,3,2005-09-06\n1,1,2005-05-13\n")
    assert loaders._fixed_width_dates(b"1,1,2005-05-13")  # last line without newline
    (tmp_path / "combined_data_1.txt").write_text(NF_VALID)
    slow = _netflix_outcome(tmp_path)

    def no_slow(*a):
        raise AssertionError("a valid file went to the per-line parser")

    monkeypatch.setattr(loaders, "_parse_netflix_slow", no_slow)
    assert _netflix_outcome(tmp_path) == slow and slow[0] == "ok"


@pytest.mark.parametrize(
    "seg",
    [
        b"10,3,2005-9-06\n",  # mixed widths
        b"10,3,2005-09-06\n10,3,2005-9-060\n",
        b"10,3,05-09-2006\n",
        b"1003,20,5-09-06\n",  # commas and dashes in the right places, the date is not YYYY
        b"10,3,2005--9-06\n",
        b"+10,3,2005-09-06\n",  # the strict parser refuses signs
        b"10, 3,2005-09-06\n",  # and accepts blanks: both for it to decide
        b"10,3,2005-09-06\r\n",
        b"10,3,2005-09-06\n\n11,3,2005-09-06\n",
        b"10,3,2005-09-06,1\n",
        b"1,2,3,2005-09-06\n12,2005-09-06\n",
        b"",
    ],
)
def test_netflix_fast_path_refuses_other_lines(seg):
    from fedsim.data import loaders

    assert loaders._fixed_width_dates(seg) is False


def test_netflix_fast_and_slow_paths_agree(tmp_path, monkeypatch):
    """Random edits of a valid file load, or fail with the same message and line, on both paths."""
    from fedsim.data import loaders

    rng = np.random.default_rng(5)
    alphabet = "0123456789,-+ \r\n:"
    texts = [NF_VALID, NF_VALID + "\n", "1:\n10,3,2005-02-30\n", "1:\n1,,2005-09-06\n", "1:\n10,3,1969-12-31\n",
             "1:\n99999999999999999999,3,2005-09-06\n", "1:\n10,3,2005-09-06\n10,6,2005-09-07\n",
             "1:\n+10,3,2005-09-06\n", "1:\n10,3,2005-+9-06\n", "1:\n1003,20,5-09-06\n", "1:\n10, 3,2005-09-06\n"]
    for _ in range(150):
        t = list(NF_VALID)
        for _ in range(rng.integers(1, 3)):
            k = int(rng.integers(len(t)))
            c = alphabet[rng.integers(len(alphabet))]
            op = rng.integers(3)
            if op == 0:
                t[k] = c
            elif op == 1:
                t.insert(k, c)
            else:
                del t[k]
        texts.append("".join(t))
    f = tmp_path / "combined_data_1.txt"
    real, taken = loaders._fixed_width_dates, []

    def spy(seg):
        taken.append(real(seg))
        return taken[-1]

    for text in texts:
        f.write_bytes(text.encode())
        monkeypatch.setattr(loaders, "_fixed_width_dates", spy)
        fast = _netflix_outcome(tmp_path)
        monkeypatch.setattr(loaders, "_fixed_width_dates", lambda seg: False)
        assert _netflix_outcome(tmp_path) == fast, text
    assert sum(taken) > 50 and taken.count(False) > 50  # both paths were exercised


def test_netflix_subset_orders():
    from fedsim.data import Ratings

    # users 0..3, items 0..3; counts: user0=4, user1=3, user2=2, user3=2 ; item0=4 item1=3 item2=2 item3=2
    pairs = [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (3, 0), (3, 3)]
    u, i = zip(*pairs)
    r = Ratings(u, i, [1] * len(u), user_ids=[10, 11, 12, 13], item_ids=[20, 21, 22, 23])
    s = netflix_subset(r, 2, 2)  # users 0,1 (most active); among them items 0,1 (3 and ... )
    assert s.user_ids.tolist() == [10, 11] and s.item_ids.tolist() == [20, 21]
    assert len(s) == 4 and s.info["netflix_subset"] == {"n_users": 2, "n_items": 2, "order": "users_first", "ratings": 4}
    # users_first vs items_first differ here: users tie (2 vs 2) between users 2 and 3 -> lower index wins
    s2 = netflix_subset(r, 3, 2, order="items_first")  # items 0,1; then users by count on them: 0,1,2 (2 each) 3 has 1
    assert s2.user_ids.tolist() == [10, 11, 12]
    s3 = netflix_subset(r, 3, 3)  # users 0,1,2 (user 2 beats 3 on the tie); items among them: 0(3),1(3),2(2)
    assert s3.user_ids.tolist() == [10, 11, 12] and s3.item_ids.tolist() == [20, 21, 22]
    s4 = netflix_subset(r, 3, 3, order="independent")  # items globally: 0(4),1(3), then 2 vs 3 tie (2) -> 2
    assert s4.item_ids.tolist() == [20, 21, 22]


# Foursquare: tests/test_data_foursquare.py


# ---------------------------------------------------------------------------------------------
# Anime


def write_anime(d, ratings="user_id,anime_id,rating\n1,20,-1\n1,24,-1\n1,79,-1\n1,226,-1\n1,241,-1\n2,11771,10\n3,20,8\n3,154,6\n"):
    d.mkdir(parents=True, exist_ok=True)
    (d / "rating.csv").write_text(ratings)
    (d / "anime.csv").write_text(
        "anime_id,name,genre,type,episodes,rating,members\n"
        '20,Naruto,"Action, Comedy, Martial Arts, Shounen, Super Power",TV,220,7.81,683297\n'
        '11771,Kuroko no Basket,"Comedy, School, Shounen, Sports",TV,25,8.46,338315\n'
        "154,Shaman King,,TV,64,7.73,95567\n"
    )
    return d


def test_anime_unrated_policies(tmp_path):
    d = write_anime(tmp_path / "anime")
    r = load_anime(d)
    assert r.name == "anime" and len(r) == 3 and r.info["unrated"] == {"policy": "drop", "rows": 5}
    assert r.user_ids.tolist() == [2, 3] and r.item_ids.tolist() == [20, 154, 11771]
    assert r.values.tolist() == [10, 8, 6]
    assert r.category_names == ["Action", "Comedy", "Martial Arts", "School", "Shounen", "Sports", "Super Power"]
    assert r.categories[0].tolist() == [1, 1, 1, 0, 1, 0, 1] and not r.categories[1].any()
    imp = load_anime(d / "rating.csv", unrated="implicit")
    assert len(imp) == 8 and np.all(imp.values == 1.0) and imp.n_users == 3 and imp.n_items == 7
    with pytest.raises(ValueError, match="unrated must be one of"):
        load_anime(d, unrated="zero")


def test_anime_malformed(tmp_path):
    d = write_anime(tmp_path / "a1", "user_id,anime_id,rating\n1,20,8\n1,24,11\n")
    with pytest.raises(DataFormatError, match="line 3: rating 11 is neither -1 nor in 1..10"):
        load_anime(d)
    d = write_anime(tmp_path / "a2", "user_id,anime_id,rating\n1,20,8\n1,24\n")
    with pytest.raises(DataFormatError, match="line 3: expected 3 fields"):
        load_anime(d)
    d = write_anime(tmp_path / "a3", "user_id,anime_id,rating\n1,20,8\n2,5,-1\n1,20,7\n")
    with pytest.raises(DataFormatError, match=r"lines 2 and 4"):
        load_anime(d)  # row numbers survive the dropping of -1 rows
    assert load_anime(d, duplicates="keep_first").values.tolist() == [8]


# ---------------------------------------------------------------------------------------------
# generic CSV


def test_csv_numeric_and_names(tmp_path):
    f = tmp_path / "r.csv"
    f.write_text("ts,item,user,score\n100,5,1,4.5\n200,6,1,2\n300,5,2,3\n")
    r = load_csv(f, user_col="user", item_col="item", rating_col="score", time_col="ts")
    assert r.name == "r" and r.user_ids.tolist() == [1, 2] and r.item_ids.tolist() == [5, 6]
    assert r.values.tolist() == [4.5, 2, 3] and r.timestamps.tolist() == [100, 200, 300]
    imp = load_csv(f, user_col=2, item_col=1, rating_col=None)
    assert np.all(imp.values == 1.0) and imp.timestamps is None
    thr = load_csv(f, user_col=2, item_col=1, rating_col=3, implicit_threshold=3)
    assert len(thr) == 2 and thr.info["binarize"]["dropped"] == 1


def test_csv_string_ids_tsv_iso_time(tmp_path):
    f = tmp_path / "r.tsv"
    f.write_text("alice\tbook-b\t5\t2012-04-03T18:07:30\nbob\tbook-a\t3\t2012-04-03 18:07:31\n")
    r = load_csv(f, 0, 1, 2, time_col=3, sep="\t", header=False)
    assert r.user_ids.tolist() == ["alice", "bob"] and r.item_ids.tolist() == ["book-a", "book-b"]
    assert r.items.tolist() == [1, 0] and r.timestamps.tolist() == [1333476450, 1333476451]


@pytest.mark.parametrize(
    "text, line, msg",
    [
        ("u,i,r\na,b,1\nc,d\n", 3, "expected 3 fields"),
        ("u,i,r\na,b,1\nc,d,good\n", 3, "rating 'good' is not a number"),
        ("u,i,r\n1,2,1\n3,4,x\n", 3, "rating 'x' is not a number"),
        ("u,i,r\n1,2,1\n,4,2\n", 3, "empty user or item id"),
    ],
)
def test_csv_malformed(tmp_path, text, line, msg):
    f = tmp_path / "r.csv"
    f.write_text(text)
    with pytest.raises(DataFormatError, match=msg) as ei:
        load_csv(f)
    assert ei.value.line == line


def test_csv_bad_column_refs(tmp_path):
    f = tmp_path / "r.csv"
    f.write_text("u,i,r\n1,2,3\n")
    with pytest.raises(ValueError, match="not in the header"):
        load_csv(f, user_col="user")
    with pytest.raises(ValueError, match="out of range"):
        load_csv(f, rating_col=5)
    with pytest.raises(ValueError, match="header=False"):
        load_csv(f, user_col="u", header=False)
