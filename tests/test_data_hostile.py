"""Hostile input files for the loaders (adversarial review): each is refused with a
DataFormatError (or ValueError) naming the file and, where there is one, the line, or loads
exactly as documented.  Small files written to tmp_path only."""

import bz2
import gzip
import io
import lzma
import zipfile

import pytest

from fedsim.data import (
    DataFormatError,
    load_anime,
    load_csv,
    load_foursquare,
    load_movielens,
    load_netflix,
    resolve,
)

ML100K = b"1\t10\t5\t881250949\n2\t20\t3\t891717742\n"
FSQ = b"user_id\tvenue_id\ttype\tutc\n1\ta\tBar\tTue Apr 03 18:07:30 +0000 2012\n"


def _zip(data: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("u.data", data)
    return buf.getvalue()


COMPRESSORS = {
    "gzip": (gzip.compress, "gzip-compressed"),
    "zip": (_zip, "a zip archive"),
    "bzip2": (bz2.compress, "bzip2-compressed"),
    "xz": (lzma.compress, "xz-compressed"),
    "zstd": (lambda d: b"\x28\xb5\x2f\xfd" + d, "zstd-compressed"),
}


@pytest.mark.parametrize("kind", sorted(COMPRESSORS))
@pytest.mark.parametrize(
    "rel, plain, load",
    [
        ("ml-100k/u.data", ML100K, lambda p: load_movielens(p.parent)),
        ("ml-100k/u.data.gz", ML100K, load_movielens),
        ("ml-1m/ratings.dat", b"1::10::5::881250949\n", lambda p: load_movielens(p.parent)),
        ("nf/mv_0000001.txt", b"1:\n6,3,2005-09-06\n", lambda p: load_netflix(p.parent)),
        ("anime/rating.csv", b"user_id,anime_id,rating\n1,2,5\n", lambda p: load_anime(p.parent)),
        ("fsq/Rome.tsv", FSQ, lambda p: load_foursquare(p, None)),
        ("csv/r.csv.gz", b"u,i,r\n1,2,5\n", load_csv),
        ("any/u.data.gz", ML100K, resolve),
        ("any/Rome.tsv.gz", FSQ, resolve),
    ],
)
def test_compressed_files_are_refused_naming_the_file_and_the_compression(tmp_path, rel, plain, load, kind):
    """A gzip'd (zip, bzip2, xz, zstd) file failed as text: 'byte b'\\x8b' ... is not valid utf-8;
    pass encoding='latin-1'' (wrong advice), a field count showing binary garbage on line 1, or
    resolve's 'cannot tell the dataset format'."""
    compress, what = COMPRESSORS[kind]
    p = tmp_path / rel
    p.parent.mkdir(parents=True)
    p.write_bytes(compress(plain))
    with pytest.raises(DataFormatError) as ei:
        load(p if load is not resolve else str(p))
    assert ei.value.path == str(p) and ei.value.line is None
    assert ei.value.reason.startswith(f"the file is {what}, not a text file: ")


def test_compressed_genre_file_is_refused(tmp_path):
    d = tmp_path / "ml-100k"
    d.mkdir()
    (d / "u.data").write_bytes(ML100K)
    (d / "u.item").write_bytes(gzip.compress(b"10|A|01-Jan-1995||u|" + b"|".join([b"0"] * 19) + b"\n"))
    with pytest.raises(DataFormatError, match="gzip-compressed") as ei:
        load_movielens(d)
    assert ei.value.path == str(d / "u.item")


def test_text_starting_like_bz2_magic_is_not_refused(tmp_path):
    """Only real magic numbers are refused: 'BZh' alone is text (a string user id)."""
    p = tmp_path / "r.csv"
    p.write_text("BZh9,item,5\nalice,item,4\n")
    r = load_csv(p, header=False)
    assert r.user_ids.tolist() == ["BZh9", "alice"]


@pytest.mark.parametrize("value", ["1e40", "-3.5e38"])
def test_a_rating_beyond_float32_is_refused_naming_the_line(tmp_path, value):
    """With scale=None a finite rating beyond float32's range was stored as +-inf, silently
    (values are float32), in a Ratings whose constructor check was skipped."""
    p = tmp_path / "r.csv"
    p.write_text(f"u,i,r\n1,2,5\n1,3,{value}\n")
    with pytest.raises(DataFormatError) as ei:
        load_csv(p, scale=None)
    assert (ei.value.path, ei.value.line) == (str(p), 3)
    assert ei.value.reason == f"rating {float(value):g} is beyond the float32 range (|rating| <= 3.4e38)"
    p.write_text("u,i,r\n1,2,5\n1,3,3.4e38\n")
    assert load_csv(p, scale=None).values.tolist() == [5.0, pytest.approx(3.4e38, rel=1e-7)]


def test_csv_header_true_on_a_file_without_header_is_refused(tmp_path):
    """With the default header=True a file without a header lost its first rating, silently
    (it became the column names): 2 rows loaded as 1."""
    p = tmp_path / "r.csv"
    p.write_text("1,2,5\n1,3,4\n")
    with pytest.raises(DataFormatError) as ei:
        load_csv(p)
    assert (ei.value.path, ei.value.line) == (str(p), 1)
    assert "header=True, but line 1 holds only numbers ('1,2,5')" in ei.value.reason
    assert "pass header=False" in ei.value.reason
    r = load_csv(p, header=False)
    assert r.user_ids.tolist() == [1] and r.item_ids.tolist() == [2, 3] and r.values.tolist() == [5.0, 4.0]
    p.write_text("user,item,5\n1,3,4\n")  # one name that is a number is still a header
    assert load_csv(p, rating_col="5").values.tolist() == [4.0]


@pytest.mark.parametrize(
    "kw, msg",
    [
        ({"user_col": 0, "item_col": 0}, "user_col and item_col name the same column (0)"),
        ({"item_col": "u"}, "user_col and item_col name the same column (0)"),
        ({"rating_col": 1}, "item_col and rating_col name the same column (1)"),
        ({"time_col": 2}, "rating_col and time_col name the same column (2)"),
        ({"time_col": "u", "rating_col": None}, "user_col and time_col name the same column (0)"),
    ],
)
def test_csv_two_roles_for_one_column_are_refused(tmp_path, kw, msg):
    """user_col=item_col loaded every user as rating the item with its own id, silently."""
    p = tmp_path / "r.csv"
    p.write_text("u,i,r,t\n1,2,5,100\n3,4,4,200\n")
    with pytest.raises(ValueError, match="^" + msg.replace("(", r"\(").replace(")", r"\)")):
        load_csv(p, **kw)


@pytest.mark.parametrize(
    "rel, line, value, scale",
    [
        ("ml-100k/u.data", "3\t30\t3.7\t881250949", "3.7", "100k's scale (whole stars 1-5)"),
        ("ml-100k/u.data", "3\t30\t4.5\t881250949", "4.5", "100k's scale (whole stars 1-5)"),
        ("ml-1m/ratings.dat", "3::30::4.5::881250949", "4.5", "1m's scale (whole stars 1-5)"),
        ("ml-10M100K/ratings.dat", "3::30::3.7::881250949", "3.7", "10m's scale (half stars 0.5-5)"),
        ("ml-20m/ratings.csv", "3,30,2.25,881250949", "2.25", "20m's scale (half stars 0.5-5)"),
    ],
)
def test_movielens_rating_off_the_star_scale_is_refused(tmp_path, rel, line, value, scale):
    """A 3.7 in ML-100K (or a 4.5 in ML-1M) lay within 1-5 and loaded, silently: the files hold
    whole stars (half stars from 10M on)."""
    p = tmp_path / rel
    p.parent.mkdir(parents=True)
    sep = "\t" if p.name == "u.data" else "::" if p.suffix == ".dat" else ","
    ok = [sep.join(["1", "10", "5", "881250949"]), sep.join(["2", "20", "1", "881250950"])]
    if p.suffix == ".csv":
        ok.insert(0, "userId,movieId,rating,timestamp")
    p.write_text("\n".join(ok + [line]) + "\n")
    with pytest.raises(DataFormatError) as ei:
        load_movielens(p.parent)
    assert (ei.value.path, ei.value.line) == (str(p), len(ok) + 1)
    assert ei.value.reason == f"rating {value} is not on MovieLens {scale}"
    half = line.replace(value, "3.5")
    p.write_text("\n".join(ok + [half]) + "\n")
    if "whole" in scale:
        with pytest.raises(DataFormatError, match="rating 3.5 is not on"):
            load_movielens(p.parent)
    else:
        assert load_movielens(p.parent).values.tolist() == [5.0, 1.0, 3.5]


def test_a_folder_holding_several_movielens_datasets_is_refused(tmp_path):
    """A parent folder holding ml-100k and ml-1m loaded ml-100k (the first by name), silently;
    resolve('~/datasets') did the same."""
    (tmp_path / "ml-100k").mkdir()
    (tmp_path / "ml-100k" / "u.data").write_bytes(ML100K)
    (tmp_path / "notes").mkdir()
    assert load_movielens(tmp_path).name == "ml-100k"  # one dataset: the parent works
    (tmp_path / "ml-1m").mkdir()
    (tmp_path / "ml-1m" / "ratings.dat").write_text("1::10::5::881250949\n")
    for load in (load_movielens, resolve):
        with pytest.raises(ValueError) as ei:
            load(str(tmp_path))
        assert str(ei.value) == (f"{tmp_path} holds 2 MovieLens datasets (ml-100k, ml-1m); "
                                 "pass the folder of the one to load")
    assert len(load_movielens(tmp_path / "ml-1m")) == 1


FLAGS = ["|".join("1" if j == k else "0" for j in range(19)) for k in range(19)]


@pytest.mark.parametrize(
    "meta_name, meta, ratings_name, ratings, line, msg",
    [
        ("u.item", f"10|A|d||u|{FLAGS[1]}\n20|B|d||u|{FLAGS[2]}\n20|B|d||u|{FLAGS[2]}\n10|A|d||u|{FLAGS[3]}\n",
         "u.data", ML100K.decode(), 4, "movie id 10 is listed again with other genres (first on line 1)"),
        ("movies.dat", "10::A::Action\n20::B::Comedy\n20::B2::Comedy\n20::B::Drama\n10::A::Drama\n",
         "ratings.dat", "1::10::5::881250949\n", 4, "movie id 20 is listed again with other genres (first on line 2)"),
        ("movies.csv", "movieId,title,genres\n10,A,Action\n10,A,Drama\n",
         "ratings.csv", "userId,movieId,rating,timestamp\n1,10,5,881250949\n", 3,
         "movie id 10 is listed again with other genres (first on line 2)"),
        ("anime.csv", 'anime_id,name,genre\n10,A,"Action, Drama"\n10,A,Comedy\n',
         "rating.csv", "user_id,anime_id,rating\n1,10,5\n", 3,
         "anime id 10 is listed again with other genres (first on line 2)"),
        ("u.item", f"99999999999999999999|A|d||u|{FLAGS[1]}\n", "u.data", ML100K.decode(), 1,
         "movie id '99999999999999999999' is out of the 64-bit integer range"),
        ("movies.dat", "1_0::A::Action\n", "ratings.dat", "1::10::5::881250949\n", 1, "movie id '1_0' is not an integer"),
        ("anime.csv", "anime_id,name,genre\n\u0661\u0660,A,Action\n", "rating.csv", "user_id,anime_id,rating\n1,10,5\n",
         2, "anime id '\u0661\u0660' is not an integer"),
    ],
)
def test_genre_files_refuse_conflicting_repeats_and_bad_ids(tmp_path, meta_name, meta, ratings_name, ratings, line, msg):
    """A movie listed twice with other genres kept the first listing, silently; an id beyond 64
    bits was an OverflowError naming no file; int() read '1_0' as 10 and Arabic-Indic digits."""
    d = tmp_path / ("anime" if meta_name == "anime.csv" else "ml-20m" if meta_name == "movies.csv"
                    else "ml-1m" if meta_name == "movies.dat" else "ml-100k")
    d.mkdir()
    (d / meta_name).write_text(meta, encoding="utf-8")
    (d / ratings_name).write_text(ratings)
    load = load_anime if meta_name == "anime.csv" else load_movielens
    with pytest.raises(DataFormatError) as ei:
        load(d)
    assert (ei.value.path, ei.value.line, ei.value.reason) == (str(d / meta_name), line, msg)


def test_genre_file_repeating_a_movie_with_the_same_genres_loads(tmp_path):
    d = tmp_path / "ml-1m"
    d.mkdir()
    (d / "movies.dat").write_text("10::A::Action|Drama\n20::B::Comedy\n10::A (again)::Action|Drama\n")
    (d / "ratings.dat").write_text("1::10::5::881250949\n1::20::3::881250949\n")
    r = load_movielens(d)
    assert r.category_names == ["Action", "Comedy", "Drama"]
    assert r.categories.tolist() == [[True, False, True], [False, True, False]]


@pytest.mark.parametrize("extra", ["", "x1\tc\tBar\tTue Apr 03 18:07:30 +0000 2012\n"])
def test_foursquare_user_written_two_ways_is_refused(tmp_path, extra):
    """'007' and '7' were one user when every id was a number and two users when another id was
    not (text ids), silently either way."""
    p = tmp_path / "x.tsv"
    t = "Tue Apr 03 18:07:30 +0000 2012"
    p.write_text(f"user_id\tvenue_id\ttype\tutc\n007\ta\tBar\t{t}\n8\tb\tBar\t{t}\n" + extra + f"7\tb\tBar\t{t}\n")
    with pytest.raises(DataFormatError) as ei:
        load_foursquare(p, None)
    assert (ei.value.path, ei.value.line) == (str(p), 4 if not extra else 5)
    assert ei.value.reason.startswith("user id '7' and '007' (line 2) are the same number written two ways")
    p.write_text(f"user_id\tvenue_id\ttype\tutc\n007\ta\tBar\t{t}\n8\tb\tBar\t{t}\n" + extra)
    r = load_foursquare(p, None)  # a leading zero alone is fine
    assert r.user_ids.tolist() == ([7, 8] if not extra else ["007", "8", "x1"])


def test_csv_column_out_of_range_names_the_file_line_and_separator(tmp_path):
    """A tab-separated file read with the default sep=',' said only 'item_col=1 is out of range
    for 1 columns', naming neither the file nor the separator."""
    p = tmp_path / "r.tsv"
    p.write_text("u\ti\tr\n1\t2\t5\n")
    with pytest.raises(ValueError) as ei:
        load_csv(p)
    assert str(ei.value) == (f"item_col=1 is out of range for 1 columns: {p}, line 1 has 1 field(s) separated by ',' "
                             "('u\\ti\\tr'); is the separator right?")
    with pytest.raises(ValueError) as ei:
        load_csv(p, sep="\t", header=False, time_col=3)
    assert str(ei.value) == f"time_col=3 is out of range for 3 columns: {p}, line 1 has 3 field(s) separated by '\\t' ('u\\ti\\tr')"
    assert load_csv(p, sep="\t").values.tolist() == [5.0]


def test_csv_a_column_name_found_twice_in_the_header_is_refused(tmp_path):
    """user_col='u' with two 'u' columns took the first, silently."""
    p = tmp_path / "r.csv"
    p.write_text("u,u,r\n1,2,5\n")
    with pytest.raises(ValueError, match=r"^user_col='u' names 2 columns of the header \(0, 1\); give the column by its "
                       "0-based index$"):
        load_csv(p, user_col="u", item_col=1)
    assert load_csv(p, user_col=1, item_col=0).user_ids.tolist() == [2]


@pytest.mark.parametrize(
    "t, epoch",
    [
        ("2012-04-03T18:07:30Z", 1333476450),
        ("2012-04-03T18:07:30", 1333476450),
        ("2012-04-03T18:07:30+02:00", 1333476450 - 7200),
        ("2012-04-03 18:07:30-0130", 1333476450 + 5400),
        ("2012-04-03T18:07+14", 1333476420 - 14 * 3600),
        ("2012-04-03T18-12:00", 1333476000 + 12 * 3600),
    ],
)
def test_csv_iso_time_offsets_apply_without_a_warning(tmp_path, t, epoch, recwarn):
    """An ISO time with an offset loaded right but numpy warned 'no explicit representation of
    timezones available for np.datetime64' (a UserWarning in the user's output)."""
    p = tmp_path / "r.csv"
    p.write_text(f"u,i,r,t\n1,2,5,{t}\n")
    assert load_csv(p, time_col="t").timestamps.tolist() == [epoch]
    assert [str(w.message) for w in recwarn] == []


@pytest.mark.parametrize("off", ["+20:00", "-13:00", "+02:75", "+1460"])
def test_csv_iso_time_with_an_impossible_offset_is_refused(tmp_path, off):
    p = tmp_path / "r.csv"
    p.write_text(f"u,i,r,t\n1,2,5,2012-04-03T18:07:30\n1,3,5,2012-04-03T18:07:30{off}\n")
    with pytest.raises(DataFormatError) as ei:
        load_csv(p, time_col="t")
    assert (ei.value.path, ei.value.line) == (str(p), 3)
    assert ei.value.reason == (f"time '2012-04-03T18:07:30{off}': UTC offset {off} is not a real offset "
                               "(-12:00 to +14:00, minutes below 60)")


@pytest.mark.parametrize("enc, bom", [("utf-16-le", "FF FE"), ("utf-16-be", "FE FF"), ("utf-32-le", "FF FE 00 00"),
                                      ("utf-32-be", "00 00 FE FF")])
@pytest.mark.parametrize(
    "rel, text, load",
    [
        ("csv/r.csv", "u,i,r\n1,2,5\n", load_csv),
        ("ml-100k/u.data", ML100K.decode(), lambda p: load_movielens(p.parent)),
        ("fsq/Rome.tsv", FSQ.decode(), lambda p: load_foursquare(p, None)),
    ],
)
def test_utf16_and_utf32_files_are_refused_naming_the_encoding(tmp_path, rel, text, load, enc, bom):
    """A spreadsheet's 'Unicode text' (UTF-16 with a byte order mark) failed with 'byte b'\\xff' is
    not valid utf-8; pass encoding='latin-1'' (NUL bytes in every field then) or a field count."""
    p = tmp_path / rel
    p.parent.mkdir(parents=True)
    p.write_bytes(bytes.fromhex(bom.replace(" ", "")) + text.encode(enc))
    with pytest.raises(DataFormatError) as ei:
        load(p)
    assert (ei.value.path, ei.value.line) == (str(p), None)
    assert ei.value.reason == (f"the file is {enc[:6].upper()} text (byte order mark {bom}), not UTF-8 or another "
                               "ASCII-compatible encoding: save it as UTF-8")


@pytest.mark.parametrize("value, reason", [("3.5", "rating 3.5 is not on MovieLens 1m's scale (whole stars 1-5)"),
                                           ("0.5", "rating 0.5 outside [1, 5]")])
def test_a_10m_extract_read_as_1m_by_its_size_says_how_to_name_the_variant(tmp_path, value, reason):
    # a small ratings.dat in a folder named nothing like ml-10m is guessed 1M by its size: the
    # refusal of its half stars did not say the variant was a guess, nor how to give it
    p = tmp_path / "extract" / "ratings.dat"
    p.parent.mkdir()
    p.write_text(f"1::10::5::881250949\n2::20::{value}::881250950\n")
    with pytest.raises(DataFormatError) as ei:
        load_movielens(p.parent)
    assert (ei.value.path, ei.value.line) == (str(p), 2)
    assert ei.value.reason == (f"{reason} (read as MovieLens 1m, guessed from the file's size: pass variant='10m' "
                               "or '1m', or name its folder ml-10m / ml-1m)")
    assert load_movielens(p.parent, variant="10m").values.tolist() == [5.0, float(value)]


# ---------------------------------------------------------------------------------------------
# a line longer than the cap (MAX_LINE_BYTES, lowered here to 64 bytes)

CAP = 64
PAD = b" " * CAP  # blanks after the last field: every parser takes them, so only the cap refuses


@pytest.mark.parametrize(
    "rel, lines, load, rows",
    [
        ("ml-100k/u.data", [b"1\t10\t5\t881250949", b"2\t20\t3\t891717742", b"3\t30\t4\t891717743"],
         lambda p: load_movielens(p.parent), 3),
        ("ml-1m/ratings.dat", [b"1::10::5::881250949", b"2::20::3::891717742", b"3::30::4::891717743"],
         lambda p: load_movielens(p.parent), 3),
        ("ml-20m/ratings.csv", [b"userId,movieId,rating,timestamp", b"1,10,5,881250949", b"2,20,3,891717742"],
         lambda p: load_movielens(p.parent), 2),
        ("nf/mv_0000001.txt", [b"1:", b"6,3,2005-09-06", b"7,4,2005-09-07"], lambda p: load_netflix(p.parent), 2),
        ("anime/rating.csv", [b"user_id,anime_id,rating", b"1,2,5", b"2,2,6"], lambda p: load_anime(p.parent), 2),
        ("fsq/Rome.tsv", [b"user_id\tvenue_id\ttype\tutc", b"1\ta\tBar\tTue Apr 03 18:07:30 +0000 2012",
                          b"2\tb\tBar\tTue Apr 03 18:07:31 +0000 2012"], lambda p: load_foursquare(p, None), 2),
        ("csv/r.csv", [b"u,i,r", b"1,2,5", b"2,2,4"], load_csv, 2),
        ("any/u.data", [b"1\t10\t5\t881250949", b"2\t20\t3\t891717742", b"3\t30\t4\t891717743"],
         lambda p: resolve(str(p)), 3),
    ],
)
def test_a_line_longer_than_the_cap_is_refused_naming_file_and_line(tmp_path, monkeypatch, rel, lines, load, rows):
    """Files are read whole and each line was parsed, split, decoded and copied whole, however long:
    one line of gigabytes (a file without line breaks) multiplied the memory of the read.  A line
    over MAX_LINE_BYTES is now an error naming it, right after the read."""
    from fedsim.data import _parse
    monkeypatch.setattr(_parse, "MAX_LINE_BYTES", CAP, raising=False)
    p = tmp_path / rel
    p.parent.mkdir(parents=True)
    exact = lines[1] + PAD[: CAP - len(lines[1])]  # CAP bytes: accepted
    assert len(exact) == CAP
    p.write_bytes(b"\n".join([lines[0], exact, lines[2]]) + b"\n")
    r = load(p)
    assert len(r) == rows and r.n_users == rows  # each row its own user
    long = lines[1] + PAD[: CAP + 1 - len(lines[1])]
    p.write_bytes(b"\n".join([lines[0], long, lines[2]]) + b"\n")
    with pytest.raises(DataFormatError) as ei:
        load(p)
    assert (ei.value.path, ei.value.line) == (str(p), 2)
    assert ei.value.reason == (f"the line is {CAP + 1} bytes long, more than the {CAP} a line may hold "
                               "(fedsim.data._parse.MAX_LINE_BYTES): not a text table with a row per line")
    # a file without line breaks: one line, the whole file
    p.write_bytes(lines[1] + PAD * 3)
    with pytest.raises(DataFormatError) as ei:
        load(p)
    assert (ei.value.path, ei.value.line) == (str(p), 1)
    assert ei.value.reason == (f"the line is {len(lines[1]) + 3 * CAP} bytes long, more than the {CAP} a line may "
                               "hold (fedsim.data._parse.MAX_LINE_BYTES): not a text table with a row per line "
                               "(the file has no line break after it)")


@pytest.mark.parametrize("meta_name, meta, ratings_name, ratings, line", [
    ("movies.dat", b"10::A::Action\n20::" + b"B" * CAP + b"::Comedy\n", "ratings.dat", b"1::10::5::881250949\n", 2),
    ("u.item", b"10|" + b"T" * CAP + b"|01-Jan-1995||http://x|" + b"|".join([b"0"] * 19) + b"\n",
     "u.data", b"1\t10\t5\t881250949\n", 1),
])
def test_a_genre_file_line_longer_than_the_cap_is_refused(tmp_path, monkeypatch, meta_name, meta, ratings_name,
                                                         ratings, line):
    from fedsim.data import _parse
    monkeypatch.setattr(_parse, "MAX_LINE_BYTES", CAP, raising=False)
    d = tmp_path / ("ml-1m" if meta_name == "movies.dat" else "ml-100k")
    d.mkdir()
    (d / ratings_name).write_bytes(ratings)
    (d / meta_name).write_bytes(meta)
    with pytest.raises(DataFormatError) as ei:
        load_movielens(d)
    assert (ei.value.path, ei.value.line) == (str(d / meta_name), line)
    n = len(meta.split(b"\n")[line - 1])
    assert ei.value.reason.startswith(f"the line is {n} bytes long, more than the {CAP} a line may hold")
    assert load_movielens(d, genres=False).n_items == 1  # the ratings themselves are fine
