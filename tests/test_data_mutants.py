"""Tests written from a hand mutation-testing pass over fedsim/data (the parsers, the MovieLens,
Netflix, Anime, CSV and Foursquare loaders, dense indexing and duplicates, the Ratings container,
the splits, the synthetic presets, the download cache and ``resolve``): each one fails with a
specific mutant of the code applied (named in its docstring) and checks the data layer against an
independent computation (small files written here with answers worked out by hand, closed forms
of the documented model), never against the function's own output. None reads ../shared/data."""

from __future__ import annotations

import numpy as np
import pytest

from fedsim.data import (
    DataFormatError,
    Ratings,
    load_csv,
    load_foursquare,
    load_movielens,
    netflix_subset,
    per_user_random,
    random_holdout,
    temporal_holdout,
    temporal_holdout_with_validation,
)
from fedsim.data._parse import parse_numeric
from fedsim.data.synthetic import generate
from test_data_foursquare import HEADER, T0, utc
from test_data_loaders import GENRES, u_item_line, write_ml100k, write_ml_csv

# ---------------------------------------------------------------------------------------------
# fedsim/data/_parse.py


def test_an_undecodable_byte_is_named_by_its_1_based_column(tmp_path):
    """Mutant: ``decode_strict`` giving the 0-based column of the bad byte. By hand: in line 3,
    ``1,\\xe93,4``, the byte 0xE9 is the third character."""
    f = tmp_path / "r.csv"
    f.write_bytes(b"u,i,r\n1,2,3\n1,\xe93,4\n")
    with pytest.raises(DataFormatError) as ei:
        load_csv(f)
    assert (ei.value.path, ei.value.line) == (str(f), 3)
    assert ei.value.reason.startswith("byte b'\\xe9' at column 3 is not valid utf-8")


def test_a_rating_overflowing_to_infinity_is_named_not_finite(tmp_path):
    """Mutant: the strict parser's finiteness check dropped (``1e999`` parsed as inf went on to
    the range check: "rating inf outside [0.5, 5]", which names no field and hides that the
    text was a number too large)."""
    d = write_ml_csv(tmp_path / "ml-20m", "userId,movieId,rating,timestamp\n1,2,3.5,10\n1,3,1e999,11\n")
    with pytest.raises(DataFormatError) as ei:
        load_movielens(d)
    assert (ei.value.path, ei.value.line) == (str(d / "ratings.csv"), 3)
    assert ei.value.reason == "field 'rating': '1e999' is not finite"


def test_parse_numeric_refuses_a_last_line_holding_only_a_carriage_return():
    """Mutant: the fast path's lone-CR check dropped: ``numpy.loadtxt`` read ``1,2,3\\n\\r`` as one
    row, where the strict parser (the reference: the fast path never accepts more) finds line 2
    empty. (The loaders strip such a last line first; parse_numeric's own contract is checked.)"""
    cols = [("a", "int"), ("b", "int"), ("c", "float")]
    for body in (b"1,2,3\n\r", b"1,2,3\r\n\r"):
        with pytest.raises(DataFormatError) as ei:
            parse_numeric("f", body, sep=",", columns=cols)
        assert (ei.value.line, ei.value.reason) == (2, "empty line")


def test_a_float32_column_keeps_a_value_float32_cannot_hold_for_the_callers_check():
    """Bug found in this pass: the fast path read a ``float32`` column (MovieLens ratings) with
    float32, so ``5.00000001`` became 5.0 and passed the loader's range and scale checks, where the
    strict parser (the reference, float64) gave 5.00000001. Now a chunk holding a value float32
    cannot hold exactly comes back in float64 (the strict parser's values); exact ones stay float32."""
    cols = [("user", "int32"), ("rating", "float32")]
    got = parse_numeric("f", b"1,3.5\n2,5.00000001\n", sep=",", columns=cols)
    assert got[1].dtype == np.float64 and got[1].tolist() == [3.5, 5.00000001]
    got = parse_numeric("f", b"1,3.5\n2,5\n", sep=",", columns=cols)
    assert got[1].dtype == np.float32 and got[1].tolist() == [3.5, 5.0]


def test_a_rating_just_off_the_movielens_scale_is_an_error_showing_its_value(tmp_path):
    """The same bug as loaded: ``5.00000001`` in an ML-20M ratings.csv loaded as 5.0 (and, when
    another line sent its chunk to the strict parser, was refused as "rating 5 outside
    [0.5, 5]": ``:g`` shows six digits); ``4.00000001`` in ML-100K passed the whole-star check.
    load_csv (float64 all along) refused 5.00000001 with the same "rating 5" message."""
    d = write_ml_csv(tmp_path / "ml-20m", "userId,movieId,rating,timestamp\n1,2,5.00000001,10\n1,3,3.5,11\n")
    with pytest.raises(DataFormatError) as ei:
        load_movielens(d)
    assert (ei.value.line, ei.value.reason) == (2, "rating 5.00000001 outside [0.5, 5]")
    d = write_ml100k(tmp_path / "ml-100k", "1\t2\t3\t10\n1\t3\t4.00000001\t11\n", items=False)
    with pytest.raises(DataFormatError) as ei:
        load_movielens(d)
    assert (ei.value.line, ei.value.reason) == (2, "rating 4.00000001 is not on MovieLens 100k's scale (whole stars 1-5)")
    f = tmp_path / "r.csv"
    f.write_text("u,i,r\n1,2,3\n1,3,5.00000001\n")
    with pytest.raises(DataFormatError) as ei:
        load_csv(f)
    assert ei.value.line == 3
    assert ei.value.reason.startswith("rating 5.00000001 outside the declared scale [1, 5]; ")


# ---------------------------------------------------------------------------------------------
# fedsim/data/loaders.py: MovieLens metadata


def test_movies_csv_line_with_a_field_too_many_names_its_line(tmp_path):
    """Mutant: ``movies.csv``'s field count unchecked: an unquoted comma in a title made the
    title's tail the genres (here ' The (1995)', a genre of its own), silently."""
    d = write_ml_csv(tmp_path / "ml-20m")
    (d / "movies.csv").write_text("movieId,title,genres\n2,Jumanji (1995),Adventure\n29,Lost Children, The (1995),Drama\n")
    with pytest.raises(DataFormatError) as ei:
        load_movielens(d)
    assert (ei.value.path, ei.value.line) == (str(d / "movies.csv"), 3)
    assert ei.value.reason == "expected 3 fields, found 4"


def test_u_genre_lines_in_any_order_give_the_genres_by_index(tmp_path):
    """Mutant: ``_read_u_genre`` not sorting by index: a u.genre listing its genres out of order
    (index 1 before 0) was refused as "genre indices are not 0..n-1" (or, in file order, named
    the flag columns wrongly). By hand: the flags of u.item are columns by index, so movie 242's
    Comedy flag (column 5) is the genre whose line says 5."""
    d = write_ml100k(tmp_path / "ml-100k")
    lines = [f"{g}|{k}" for k, g in enumerate(GENRES)]
    lines[0], lines[5] = lines[5], lines[0]  # Comedy|5 first, unknown|0 sixth
    (d / "u.genre").write_text("\n".join(lines) + "\n")
    r = load_movielens(d)
    assert r.category_names == GENRES
    assert [r.category_names[j] for j in np.flatnonzero(r.categories[r.item_ids.tolist().index(242)])] == ["Comedy"]


def test_u_item_line_with_a_field_too_many_names_its_line(tmp_path):
    """Mutant: ``_read_u_item`` accepting more than 5 + 19 fields (only fewer refused): the extra
    flag made the flag matrix ragged, a bare ValueError naming no file."""
    d = write_ml100k(tmp_path / "ml-100k")
    lines = (d / "u.item").read_text(encoding="latin-1").split("\n")
    lines[1] += "|0"
    (d / "u.item").write_text("\n".join(lines), encoding="latin-1")
    with pytest.raises(DataFormatError) as ei:
        load_movielens(d)
    assert (ei.value.path, ei.value.line) == (str(d / "u.item"), 2)
    assert ei.value.reason == "expected 24 '|'-separated fields, found 25"


def test_u_item_genre_flag_other_than_0_or_1_names_its_line(tmp_path):
    """Mutant: the genre flags unchecked: a flag '2' (or 'y') read as "not in the genre", silently."""
    d = write_ml100k(tmp_path / "ml-100k")
    lines = (d / "u.item").read_text(encoding="latin-1").split("\n")
    lines[2] = u_item_line(377, "Heavyweights (1994)", ["Comedy"]).replace("|1|", "|2|")
    (d / "u.item").write_text("\n".join(lines), encoding="latin-1")
    with pytest.raises(DataFormatError) as ei:
        load_movielens(d)
    assert (ei.value.path, ei.value.line, ei.value.reason) == (str(d / "u.item"), 3, "genre flags must be 0 or 1")


# ---------------------------------------------------------------------------------------------
# fedsim/data/loaders.py: netflix_subset


def test_netflix_subset_users_first_ranks_items_among_the_kept_users_only():
    """Mutant: ``users_first`` ranking items over the whole data (= ``independent``). By hand:
    users 0 and 1 are the most active (3 ratings each, users 2-4 one each); among them item A is
    rated twice (C also twice, A has the lower index), B never; over all users B is the most
    popular (3). So users_first keeps {0, 1} x {A}: 2 ratings; independent {0, 1} x {B}: none;
    items_first {B} x {2, 3} (one rating each, lower indices first): 2 ratings."""
    A, B, C, D, E = range(5)
    pairs = [(0, A), (0, C), (0, D), (1, A), (1, C), (1, E), (2, B), (3, B), (4, B)]
    u, i = zip(*pairs)
    r = Ratings(u, i, np.ones(len(u)), user_ids=[100, 101, 102, 103, 104], item_ids=[10, 11, 12, 13, 14])
    s = netflix_subset(r, 2, 1)
    assert (s.user_ids.tolist(), s.item_ids.tolist(), len(s)) == ([100, 101], [10], 2)
    s = netflix_subset(r, 2, 1, order="independent")
    assert (s.user_ids.tolist(), s.item_ids.tolist(), len(s)) == ([100, 101], [11], 0)
    s = netflix_subset(r, 2, 1, order="items_first")
    assert (s.user_ids.tolist(), s.item_ids.tolist(), len(s)) == ([102, 103], [11], 2)


def test_netflix_customer_id_0_names_its_line(tmp_path):
    """Mutant: the Netflix loader's customer id check (>= 1) dropped: a customer 0 loaded as a
    user. By hand: the bad row is line 3 (line 1 is the ``1:`` movie line)."""
    from fedsim.data import load_netflix

    f = tmp_path / "mv_0000001.txt"
    f.write_text("1:\n5,3,2005-09-06\n0,4,2005-09-07\n")
    with pytest.raises(DataFormatError) as ei:
        load_netflix(f)
    assert (ei.value.path, ei.value.line, ei.value.reason) == (str(f), 3, "customer id 0 must be >= 1")


# ---------------------------------------------------------------------------------------------
# fedsim/data/ratings.py


def test_fingerprint_depends_on_the_timestamps():
    """Mutant: ``Ratings.fingerprint`` leaving the timestamps out: two datasets that split
    differently in time (temporal_holdout) had the same fingerprint."""
    a = Ratings([0, 0], [0, 1], [1.0, 2.0], timestamps=[5, 6])
    b = Ratings([0, 0], [0, 1], [1.0, 2.0], timestamps=[6, 5])
    assert a.fingerprint() == Ratings([0, 0], [0, 1], [1.0, 2.0], timestamps=[5, 6]).fingerprint()
    assert a.fingerprint() != b.fingerprint()


def test_filter_users_keeps_the_ids_of_the_items_still_rated():
    """Mutant: ``reindex`` taking the first ``k`` item ids instead of those kept. By hand: items
    10, 20, 30; user 0 (2 ratings, items 10 and 30) stays with min_count 2, user 1 (item 20) goes,
    so items 10 and 30 remain, with their ratings."""
    r = Ratings([0, 1, 0], [0, 1, 2], [4.0, 3.0, 5.0], user_ids=[7, 8], item_ids=[10, 20, 30])
    f = r.filter_users(2)
    assert f.user_ids.tolist() == [7] and f.item_ids.tolist() == [10, 30]
    assert sorted(zip(f.item_ids[f.items].tolist(), f.values.tolist())) == [(10, 4.0), (30, 5.0)]


# ---------------------------------------------------------------------------------------------
# fedsim/data/_build.py


def test_item_id_0_cannot_index_the_id_range_space(tmp_path):
    """Mutant: ``build_ratings`` refusing only negative ids in the ``id_range`` space (index = id - 1):
    item 0 became index -1, a rating of the last item, silently. By hand: the row of item 0 is
    line 3 of the file."""
    f = tmp_path / "r.csv"
    f.write_text("u,i,r\n1,2,3\n1,0,4\n")
    with pytest.raises(DataFormatError) as ei:
        load_csv(f, item_space="id_range")
    assert (ei.value.path, ei.value.line) == (str(f), 3)
    assert ei.value.reason == "item id 0 < 1 cannot be used with item_space='id_range'"
    r = load_csv(f)  # observed ids: 0 is an id like any other
    assert r.item_ids.tolist() == [0, 2] and r.items.tolist() == [1, 0]


# ---------------------------------------------------------------------------------------------
# fedsim/data/splits.py


@pytest.mark.parametrize("split", [random_holdout, per_user_random, temporal_holdout])
def test_a_test_fraction_of_one_is_refused(split):
    """Mutant: ``_check_frac`` accepting 1.0 (an empty training part, every rating in test)."""
    r = Ratings([0, 0, 1], [0, 1, 0], np.ones(3), timestamps=[1, 2, 3])
    with pytest.raises(ValueError, match=r"test_frac must be in \[0, 1\), got 1.0"):
        split(r, test_frac=1.0)


def test_validation_cut_uses_val_frac_on_what_the_test_cut_left():
    """Mutant: the validation cut taken with ``test_frac``. By hand, one user with 8 ratings at
    t = 0..7, test_frac 0.5, val_frac 0.25: test = the 4 latest (t 4..7); of the 4 left, val =
    floor(0.25 x 4) = 1 (t 3); train t 0..2. (With test_frac for both, val would be t 2, 3.)"""
    r = Ratings([0] * 8, list(range(8)), np.ones(8), timestamps=[3, 1, 7, 0, 5, 2, 6, 4])
    train, val, test = temporal_holdout_with_validation(r, test_frac=0.5, val_frac=0.25)
    assert sorted(test.timestamps.tolist()) == [4, 5, 6, 7]
    assert val.timestamps.tolist() == [3]
    assert sorted(train.timestamps.tolist()) == [0, 1, 2]


# ---------------------------------------------------------------------------------------------
# fedsim/data/synthetic.py


def test_every_synthetic_item_is_rated_even_when_ratings_are_fewer_than_items():
    """Mutant: the "every item rated at least once" step dropped. By pigeonhole, 150 ratings
    cannot cover 200 items: at least 50 items need the extra ratings the model gives them (one
    each, to users who lack them), so the total is at most 150 + 200."""
    r = generate("tiny", n_users=30, n_items=200, n_ratings=150, min_per_user=5)
    counts = r.item_counts()
    assert r.n_items == 200 and counts.min() >= 1
    assert 200 <= len(r) <= 350
    assert len(set(zip(r.users.tolist(), r.items.tolist()))) == len(r)  # no pair twice


def test_synthetic_timestamps_lie_in_the_dataset_period():
    """Mutant: a user's span not capped at ``t_end``: ratings after the period. The model: each
    user starts uniformly in [t_start, t_end] and is active over a log-normal span (median two
    weeks) cut at t_end; a period of one day leaves most spans cut."""
    t0, t1 = 1_000_000_000, 1_000_086_400
    r = generate("tiny", t_start=t0, t_end=t1)
    assert t0 <= r.timestamps.min() and r.timestamps.max() <= t1


def test_synthetic_user_activity_excess_is_log_normal_with_sigma_1_1():
    """Mutant: the base ``activity_sigma`` 1.1 set to 0.1 (every user about as active as the
    mean: no heavy tail). The model: a user's count is ``min_per_user`` + a log-normal excess of
    sigma 1.1, scaled to the total; a log-normal's mean over its median is exp(sigma^2 / 2) =
    1.83 (1.005 for sigma 0.1), whatever the scale. 2,000 users, a cap 25 times the mean excess
    (so the cut tail is negligible), integer rounding: about 1.8-1.9."""
    r = generate("tiny", n_users=2000, n_items=1000, n_ratings=50_000, min_per_user=5)
    excess = r.user_counts() - 5
    assert 40_000 <= excess.sum() <= 41_000  # 50,000 - 2,000 x 5, plus one for each item nobody chose
    ratio = excess.mean() / np.median(excess)
    assert 1.6 < ratio < 2.2, ratio


def test_synthetic_ratings_on_a_larger_scale_stretch_the_five_star_model_linearly():
    """Mutant: ``rating_max`` stretching by top / 5 instead of (top - 1) / 4. The model: the same
    draws (the stretch comes after every draw) give the 1..5 raw score x and the 1..10 score
    1 + (x - 1) x 9 / 4, both rounded and clipped. So, rating by rating, the 1..10 value is the
    five-star value mapped the same way, up to rounding (a mean error near 0); with the mutant's
    factor 2 the mean falls short by about 0.25 x (mean - 1), some 0.6."""
    five = generate("tiny", n_users=200, n_items=100, n_ratings=4000, seed=3)
    ten = generate("tiny", n_users=200, n_items=100, n_ratings=4000, seed=3, rating_max=10)
    assert np.array_equal(five.users, ten.users) and np.array_equal(five.items, ten.items)
    assert set(np.unique(ten.values).tolist()) <= set(range(1, 11)) and ten.values.max() == 10
    gap = float(np.mean(ten.values - (1 + (five.values - 1) * 9 / 4)))
    assert abs(gap) < 0.2, gap


# ---------------------------------------------------------------------------------------------
# fedsim/data/download.py


def test_a_dataset_folder_without_the_install_marker_is_not_installed(tmp_path):
    """Mutant: ``is_installed`` taking any folder of the dataset's name for an install: a folder
    left without its marker (not a fedsim install: ``get`` refuses to overwrite it) was listed
    as installed and undamaged by ``fedsim data list``."""
    from fedsim.data import download

    cache = tmp_path / "cache"
    write_ml100k(cache / "ml-100k", items=False)
    assert not download.is_installed("ml-100k", cache)
    (row,) = [d for d in download.list_datasets(cache) if d["name"] == "ml-100k"]
    assert (row["installed"], row["damaged"], row["path"]) == (False, None, str(cache / "ml-100k"))


def test_a_folder_in_the_way_is_refused_before_the_archive_is_read(tmp_path):
    """Mutant: the early check for a dataset folder without a marker dropped: the same
    FileExistsError came only after the whole archive was read (downloaded: 200 MB for ml-20m)
    and unpacked. Nothing is read (the progress callback never called) and the folder is left
    as it was."""
    from fedsim.data import download
    from test_data_download import U_DATA, make_zip

    sha = make_zip(tmp_path / "ml-100k.zip", {"ml-100k/u.data": U_DATA})
    cache = tmp_path / "cache"
    (cache / "ml-100k").mkdir(parents=True)
    (cache / "ml-100k" / "mine.txt").write_text("x")
    seen = []
    with pytest.raises(FileExistsError, match="not a complete fedsim install"):
        download.get("ml-100k", from_file=tmp_path / "ml-100k.zip", cache_dir=cache, sha256=sha,
                     progress=lambda n, total: seen.append(n))
    assert seen == []
    assert sorted(p.name for p in cache.rglob("*")) == ["mine.txt", "ml-100k"]


# ---------------------------------------------------------------------------------------------
# fedsim/data/resolve.py


def test_resolve_ignores_seed_for_a_path(tmp_path):
    """Mutant: ``resolve`` passing ``seed`` on to the loader (a TypeError from load_movielens);
    its docstring: seed is accepted and ignored for files."""
    from fedsim.data import resolve

    d = write_ml100k(tmp_path / "ml-100k", items=False)
    r = resolve(str(d), seed=3)
    assert r.name == "ml-100k" and len(r) == 4 and r.user_ids.tolist() == [22, 186, 196]


def test_a_tab_separated_file_without_a_venue_column_is_not_read_as_foursquare(tmp_path):
    """Mutant: ``load_path`` taking any tab-separated first line (not only one naming a venue) for
    Foursquare check-ins: a generic TSV of ratings failed with Foursquare's "field 'utc'" error
    instead of the pointer to load_csv."""
    from fedsim.data import resolve

    f = tmp_path / "ratings.tsv"
    f.write_text("1\t10\t4\n2\t10\t3\n")
    with pytest.raises(ValueError) as ei:
        resolve(str(f))
    assert str(ei.value) == f"{f}: cannot tell the dataset format; use fedsim.data.load_csv(path, user_col=..., ...)"


# ---------------------------------------------------------------------------------------------
# fedsim/data/foursquare.py


def test_a_type_matching_two_names_up_to_case_stays_unmapped(tmp_path):
    """Mutant: the case/space-insensitive match resolving a name that two known names share
    (``BAR`` for ``Bar`` and ``bar``) to the first of them. By hand: the mapping sends ``Bar`` to
    ``Nightlife`` and ``bar`` to ``Food``; ``BAR`` is neither exactly, so its venue gets no
    category; ``bar`` maps exactly."""
    f = tmp_path / "city.tsv"
    f.write_text(HEADER + f"1\tv1\tBAR\t{utc(T0)}\n" + f"1\tv2\tbar\t{utc(T0 + 60)}\n")
    r = load_foursquare(f, None, categories={"Bar": "Nightlife", "bar": "Food"})
    assert r.category_names == ["Food", "Nightlife"]
    cats = {v: [r.category_names[j] for j in np.flatnonzero(r.categories[k])] for k, v in enumerate(r.item_ids.tolist())}
    assert cats == {"v1": [], "v2": ["Food"]}
    assert r.info["categories"]["unmapped"]["types"] == {"BAR": 1}
