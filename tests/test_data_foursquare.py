"""Foursquare: the loader, the shipped category map (FPL's nine top-level categories), the repair
of mangled type names, the FPL user filters, and the per-user temporal split on check-ins."""

import calendar
import time

import numpy as np
import pytest

from fedsim.data import DataFormatError, load_foursquare, temporal_holdout_with_validation
from fedsim.data.foursquare import TOP_LEVEL_CATEGORIES, USER_FILTERS, category_map, repair_type

HEADER = "user_id\tvenue_id\ttype\tutc\n"
CAFE = "Caf\x1a\x1a"  # the corrupted "Café" of the FedBPR files
T0 = calendar.timegm((2012, 4, 1, 18, 7, 30))


def utc(t):
    return time.strftime("%a %b %d %H:%M:%S +0000 %Y", time.gmtime(t))


def rows(user, n, t0=T0, cat="Plaza", venue="v"):
    """n check-ins of ``user`` at venues v000.., one a day; odd venues have type ``cat``, even ones Café."""
    return "".join(f"{user}\t{venue}{k:03d}\t{cat if k % 2 else CAFE}\t{utc(t0 + 86400 * k)}\n" for k in range(n))


# ---------------------------------------------------------------------------------------------
# format and user filter


def test_format_and_the_two_user_filters(tmp_path):
    f = tmp_path / "Bologna.tsv"
    f.write_text(HEADER + rows(5830, 20) + rows(193602, 19) + rows(42, 21))
    r = load_foursquare(f)  # the paper: more than 20 venues
    assert r.name == "foursquare-bologna"
    assert r.user_ids.tolist() == [42] and r.n_items == 21 and len(r) == 21 and np.all(r.values == 1.0)
    assert r.info["user_filter"] == {"rule": "paper", "min_venues": 21, "users_before": 3, "users_kept": 1,
                                     "checkins_kept": 21}
    assert r.info["rows_read"] == 60 and r.timestamps.min() == T0
    code = load_foursquare(f, "code")  # the authors' code: at least 20
    assert code.user_ids.tolist() == [42, 5830] and len(code) == 41
    assert code.info["filter_users"]["users_removed"] == 1 and code.info["filter_users"]["ratings_removed"] == 19
    assert USER_FILTERS == {"paper": 21, "code": 20}
    assert load_foursquare(f, 19).n_users == 3
    assert load_foursquare(f, None).n_users == 3 and load_foursquare(f, 0).info["user_filter"]["rule"] == "none"
    # the older keyword
    assert load_foursquare(f, min_interactions=20).user_ids.tolist() == [42, 5830]
    with pytest.raises(ValueError, match="not both"):
        load_foursquare(f, "code", min_interactions=20)
    for bad in ("paper2", -1, True, 2.5):
        with pytest.raises(ValueError, match="user_filter must be"):
            load_foursquare(f, bad)
    with pytest.raises(ValueError, match=r"Bologna.tsv: no user has 22 or more distinct venues"):
        load_foursquare(f, 22)


def test_timezone_offset(tmp_path):
    f = tmp_path / "x.tsv"
    f.write_text(HEADER + "1\tv1\tPlaza\tTue Apr 03 18:07:30 +0200 2012\n")
    r = load_foursquare(f, None)
    assert r.timestamps[0] == calendar.timegm((2012, 4, 3, 16, 7, 30))


@pytest.mark.parametrize("off, shift", [("+1400", 14 * 3600), ("-1200", -12 * 3600), ("+0545", 5 * 3600 + 45 * 60),
                                        ("-0000", 0)])
def test_timezone_offset_range_ends_load(tmp_path, off, shift):
    f = tmp_path / "x.tsv"
    f.write_text(HEADER + f"1\tv1\tPlaza\tTue Apr 03 18:07:30 {off} 2012\n")
    assert load_foursquare(f, None).timestamps[0] == calendar.timegm((2012, 4, 3, 18, 7, 30)) - shift


@pytest.mark.parametrize(
    "off, msg",
    [
        ("+9999", r"impossible UTC offset \+9999 \(minutes above 59\)"),
        ("-0075", r"impossible UTC offset -0075 \(minutes above 59\)"),
        ("+0060", r"impossible UTC offset \+0060"),
        ("+1401", r"UTC offset \+1401 is outside the real range of offsets, -1200 to \+1400"),
        ("-1201", r"UTC offset -1201 is outside the real range"),
        ("+2300", r"UTC offset \+2300 is outside the real range"),
    ],
)
def test_timezone_offset_out_of_range_names_file_and_line(tmp_path, off, msg):
    f = tmp_path / "x.tsv"
    f.write_text(HEADER + "1\tv1\tPlaza\tTue Apr 03 18:07:30 +0000 2012\n"
                 f"1\tv2\tPlaza\tTue Apr 03 18:07:30 {off} 2012\n")
    with pytest.raises(DataFormatError, match=msg) as ei:
        load_foursquare(f, None)
    assert ei.value.path == str(f) and ei.value.line == 3


def test_headerless_tist(tmp_path):
    f = tmp_path / "tist.txt"
    f.write_text("50756\t4f5e3a72e4b053fd6a4313f6\tTue Apr 03 18:00:06 +0000 2012\t240\n"
                 "190571\t4b4b87b5f964a5204a9f26e3\tTue Apr 03 18:00:07 +0000 2012\t180\n")
    r = load_foursquare(f, None)
    assert len(r) == 2 and r.categories is None and r.user_ids.tolist() == [50756, 190571]
    assert r.info["categories"]["note"] == "the file has no type column"


@pytest.mark.parametrize(
    "row, msg",
    [
        ("1\tv1\tPlaza\tTue Apr 33 18:07:30 +0000 2012\n", "field 'utc'"),
        ("1\tv1\tPlaza\tTue Apx 03 18:07:30 +0000 2012\n", "field 'utc'"),
        ("1\tv1\tPlaza\n", "expected 4 tab-separated fields"),
        ("\tv1\tPlaza\tTue Apr 03 18:07:30 +0000 2012\n", "empty user or venue"),
        ("1\tv1\tPlaza\tWed Dec 31 23:59:59 +0000 1969\n", "before 1970"),
    ],
)
def test_malformed(tmp_path, row, msg):
    f = tmp_path / "c.tsv"
    f.write_text(HEADER + rows(1, 2) + row)
    with pytest.raises(DataFormatError, match=msg) as ei:
        load_foursquare(f, None)
    assert ei.value.line == 4


def test_duplicates(tmp_path):
    f = tmp_path / "c.tsv"
    f.write_text(HEADER + "1\tv1\tPlaza\tTue Apr 03 18:07:30 +0000 2012\n"
                 "1\tv1\tPlaza\tWed Apr 04 18:07:30 +0000 2012\n")
    with pytest.raises(DataFormatError, match=r"lines 2 and 3"):
        load_foursquare(f, None)
    last = load_foursquare(f, None, duplicates="keep_last")
    assert len(last) == 1 and last.info["duplicates"]["rows_removed"] == 1
    assert last.timestamps.tolist() == [calendar.timegm((2012, 4, 4, 18, 7, 30))]
    first = load_foursquare(f, None, duplicates="keep_first")
    assert first.timestamps.tolist() == [calendar.timegm((2012, 4, 3, 18, 7, 30))]


def test_ids_beyond_int64_stay_strings(tmp_path):
    f = tmp_path / "c.tsv"
    f.write_text(HEADER + "100000000000000000000\tv1\tPlaza\tTue Apr 03 18:07:30 +0000 2012\n"
                 "7\tv1\tPlaza\tTue Apr 03 18:07:30 +0000 2012\n")
    r = load_foursquare(f, None)
    assert r.user_ids.tolist() == ["100000000000000000000", "7"]


# ---------------------------------------------------------------------------------------------
# the category map


def test_category_map_file_parses_and_states_its_source():
    from importlib import resources

    text = resources.files("fedsim.data").joinpath("foursquare_categories.tsv").read_text(encoding="utf-8")
    header = [ln for ln in text.splitlines() if ln.startswith("#")]
    assert any("github.com/popomore/foursquare-category" in ln and "data.json" in ln for ln in header)
    assert any("1f3fd4b64d442aea2d1cbd1afe91ae422ff7b1cd" in ln for ln in header)
    assert any("a047b0c7607ba0295f7718137f22be662721c06c" in ln for ln in header)
    m = category_map(with_source=True)
    assert len(m) > 600
    assert {top for top, _ in m.values()} == set(TOP_LEVEL_CATEGORIES)
    assert {src for _, src in m.values()} == {"api-2014", "list-2013", "top-level", "judgement"}
    for top in TOP_LEVEL_CATEGORIES:
        assert m[top] == (top, "top-level")
    assert m["Café"] == ("Food", "api-2014")
    assert m["Italian Restaurant"][0] == "Food" and m["Train Station"][0] == "Travel & Transport"
    assert m["Home (private)"][0] == "Residence" and m["College Classroom"][0] == "College & University"
    assert m["Athletic & Sport"] == ("Outdoors & Recreation", "list-2013")
    assert m["Brewery"][0] == "Nightlife Spot"  # the 2014 tree wins over the 2013 list
    assert "Conference" not in m  # the Event branch is not one of the nine
    # every judgement line is explained by the comment just above it
    lines = text.splitlines()
    for k, ln in enumerate(lines):
        if ln.endswith("\tjudgement"):
            assert lines[k - 1].startswith("# judgement:"), ln
    assert category_map()["Plaza"] == "Outdoors & Recreation"


def test_repair_type():
    known = category_map()
    assert repair_type("Caf\x1a\x1a", known) == "Café"
    assert repair_type("Caf\x1a", known) == "Café"
    assert repair_type("Caf\ufffd", known) == "Café"
    assert repair_type("Kokore\x1a\x1a Restaurant", known) == "Kokoreç Restaurant"
    assert repair_type("Caf\x1a\x1a\x1a", known) == "Café"  # n SUB stand for 1..n characters
    assert repair_type("Cafe", known) is None  # nothing mangled
    assert repair_type("Pla\x1aa", known) is None  # 'z' is ASCII: no match
    assert repair_type("Caf\x1a", ["Café", "Cafè"]) is None  # ambiguous: left alone
    assert repair_type("X\x1a", []) is None


def test_tiny_file_with_mangled_names_maps_as_expected(tmp_path):
    f = tmp_path / "Tiny.tsv"
    lines = [
        ("1", "a", CAFE), ("1", "b", "Caf\x1a"), ("1", "c", "Plaza"), ("2", "a", CAFE), ("2", "d", "Conference"),
        ("2", "e", "Athletic & Sport"), ("3", "f", "Ramen /  Noodle House"), ("3", "g", "Unheard-of Type"),
        ("3", "d", "Conference"), ("3", "h", "home (private)"), ("3", "i", "Yogurt"),
    ]
    f.write_text(HEADER + "".join(f"{u}\t{v}\t{t}\t{utc(T0 + k)}\n" for k, (u, v, t) in enumerate(lines)))
    r = load_foursquare(f, None)
    assert r.category_names == list(TOP_LEVEL_CATEGORIES) and r.categories.shape == (9, 9)
    top = {v: (r.category_names[int(np.flatnonzero(row)[0])] if row.any() else None)
           for v, row in zip(r.item_ids.tolist(), r.categories)}
    assert top == {"a": "Food", "b": "Food", "c": "Outdoors & Recreation", "d": None, "e": "Outdoors & Recreation",
                   "f": "Food", "g": None, "h": "Residence", "i": "Food"}
    c = r.info["categories"]
    assert c["mode"] == "top" and c["map"] == "fedsim/data/foursquare_categories.tsv"
    assert c["repaired"] == {"Caf\x1a": "Café", CAFE: "Café", "home (private)": "Home (private)"}
    assert c["rows_repaired"] == 4
    assert c["unmapped"] == {"types": {"Conference": 2, "Unheard-of Type": 1}, "n_types": 2, "venues": 2,
                             "checkins": 3, "venues_kept": 2, "checkins_kept": 3}
    assert c["venues_with_conflicting_type"] == 0
    assert r.info["items_without_category"] == 2
    # after the user filter the kept counts follow (user 3 alone keeps 5 venues, 2 check-ins unmapped)
    k = load_foursquare(f, 5)
    assert k.user_ids.tolist() == [3] and k.info["categories"]["unmapped"]["checkins_kept"] == 2
    assert k.info["categories"]["unmapped"]["checkins"] == 3  # whole-file figure unchanged
    # fine-grained types: the two spellings of Café are one column
    t = load_foursquare(f, None, categories="type")
    assert "Café" in t.category_names and CAFE not in t.category_names
    assert t.category_names.count("Café") == 1 and "Unheard-of Type" in t.category_names
    assert "Home (private)" in t.category_names and t.info["categories"]["unmapped"]["n_types"] == 0
    # a mapping of one's own, and no categories at all
    own = load_foursquare(f, None, categories={"Café": "coffee", "Plaza": "square"})
    assert own.category_names == ["coffee", "square"] and own.info["categories"]["unmapped"]["venues"] == 6
    assert load_foursquare(f, None, categories=None).categories is None
    with pytest.raises(ValueError, match="categories must be"):
        load_foursquare(f, None, categories="fine")


def test_conflicting_types_keep_the_first(tmp_path):
    f = tmp_path / "c.tsv"
    f.write_text(HEADER + f"1\tv1\tPlaza\t{utc(T0)}\n2\tv1\tPark\t{utc(T0 + 1)}\n3\tv1\tBar\t{utc(T0 + 2)}\n")
    r = load_foursquare(f, None)  # Plaza and Park are both Outdoors & Recreation; Bar is not
    assert r.info["categories"]["venues_with_conflicting_type"] == 1
    assert r.categories[0, TOP_LEVEL_CATEGORIES.index("Outdoors & Recreation")]
    assert load_foursquare(f, None, categories="type").info["categories"]["venues_with_conflicting_type"] == 1


# ---------------------------------------------------------------------------------------------
# the per-user temporal split on check-ins


def test_temporal_split_of_checkins_hand_computed(tmp_path):
    # user 7: 10 check-ins written in shuffled order; user 8: 21; user 9: 4 (kept with user_filter=4)
    order = [3, 9, 0, 5, 1, 8, 2, 7, 4, 6]
    lines = [f"7\tv{k:02d}\tPlaza\t{utc(T0 + 3600 * k)}\n" for k in order]
    lines += [f"8\tw{k:02d}\tBar\t{utc(T0 + 60 * k)}\n" for k in range(21)][::-1]
    lines += [f"9\tv{k:02d}\tPark\t{utc(T0 + 7 * k)}\n" for k in range(4)]
    f = tmp_path / "Split.tsv"
    f.write_text(HEADER + "".join(lines))
    r = load_foursquare(f, 4)
    train, val, test = temporal_holdout_with_validation(r, 0.2, 0.2)

    def items_of(part, user):
        u = r.user_ids.tolist().index(user)
        return sorted(r.item_ids[part.items[part.users == u]].tolist())

    # user 7: floor(0.2 * 10) = 2 latest are test; floor(0.2 * 8) = 1 validation, the latest of the other 8
    assert items_of(test, 7) == ["v08", "v09"]
    assert items_of(val, 7) == ["v07"]
    assert items_of(train, 7) == [f"v{k:02d}" for k in range(7)]
    # user 8: test floor(4.2) = 4, validation floor(0.2 * 17) = 3, train 14
    assert items_of(test, 8) == [f"w{k:02d}" for k in range(17, 21)]
    assert items_of(val, 8) == ["w14", "w15", "w16"]
    assert len(items_of(train, 8)) == 14
    # user 9: floor(0.8) = 0 test, floor(0.8) = 0 validation: nobody is lost
    assert items_of(train, 9) == ["v00", "v01", "v02", "v03"] and items_of(test, 9) == [] == items_of(val, 9)
    assert set(train.users.tolist()) == {0, 1, 2}
    assert len(train) + len(val) + len(test) == len(r) == 35
    # temporal order per user: every training time <= every validation time <= every test time
    for u in range(r.n_users):
        tr, va, te = (p.timestamps[p.users == u] for p in (train, val, test))
        if va.size:
            assert tr.max() <= va.min()
        if te.size:
            assert max(tr.max(), va.max() if va.size else tr.max()) <= te.min()
    # the validation cut comes from the training part only
    key = lambda p: set(zip(p.users.tolist(), p.items.tolist()))  # noqa: E731
    assert not key(val) & key(test) and not key(val) & key(train)


# ---------------------------------------------------------------------------------------------
# the real city files (skipped when ../shared/data is absent)

CITIES = ("Bologna", "Florence", "Milan", "Rome", "Turin", "Venice")
CHECKINS = {"Bologna": 8093, "Florence": 8292, "Milan": 35398, "Rome": 23214, "Turin": 8616, "Venice": 6003}


def test_every_type_of_the_six_cities_maps(fsq_dir):
    known = category_map()
    report = []
    for city in CITIES:
        f = fsq_dir / f"{city}.tsv"
        if not f.is_file():
            pytest.skip(f"{f} absent")
        r = load_foursquare(f, None)
        assert len(r) == CHECKINS[city]
        c = r.info["categories"]
        paper, code = load_foursquare(f, "paper"), load_foursquare(f, "code")
        raw = {ln.split(b"\t")[2].decode() for ln in f.read_bytes().splitlines()[1:] if ln}
        report.append(
            f"{city:9s} users {r.n_users:5d} (>20 venues: {paper.n_users:4d}, >=20: {code.n_users:4d})  "
            f"venues {r.n_items:6d} ({paper.n_items:5d}, {code.n_items:5d})  "
            f"check-ins {len(r):6d} ({len(paper):6d}, {len(code):6d})  types {len(raw)}, unmapped "
            f"types/venues/check-ins {c['unmapped']['n_types']}/{c['unmapped']['venues']}/{c['unmapped']['checkins']}, "
            f"rows repaired {c['rows_repaired']}"
        )
        assert c["unmapped"] == {"types": {}, "n_types": 0, "venues": 0, "checkins": 0, "venues_kept": 0,
                                 "checkins_kept": 0}, city
        assert set(c["repaired"]) <= {"Caf\x1a", "Caf\x1a\x1a"} and set(c["repaired"].values()) <= {"Café"}
        assert r.categories.sum(axis=1).tolist() == [1] * r.n_items
        assert all(t in known or repair_type(t, known) for t in raw)
    print("\n" + "\n".join(report))
