import pytest

from fedsim.data import load_path, resolve


def test_resolve_presets_and_passthrough():
    r = resolve("tiny")
    assert r.name == "synthetic:tiny"
    assert resolve(r) is r
    assert resolve("synthetic:tiny", seed=0).fingerprint() == r.fingerprint()


def test_resolve_paths(tmp_path):
    ml = tmp_path / "ml-100k"
    ml.mkdir()
    (ml / "u.data").write_text("1\t2\t3\t4\n")
    assert len(resolve(str(ml))) == 1
    assert len(resolve(ml / "u.data", seed=3)) == 1  # PathLike; seed ignored for files
    assert resolve(str(ml), item_space="id_range").n_items == 2

    fsq = tmp_path / "Rome.tsv"
    fsq.write_text("user_id\tvenue_id\ttype\tutc\n1\tv\tPlaza\tTue Apr 03 18:07:30 +0000 2012\n")
    assert resolve(str(fsq), min_interactions=0).name == "foursquare-rome"

    an = tmp_path / "anime"
    an.mkdir()
    (an / "rating.csv").write_text("user_id,anime_id,rating\n1,2,8\n")
    assert resolve(str(an)).name == "anime"

    nf = tmp_path / "nf" / "training_set"
    nf.mkdir(parents=True)
    (nf / "mv_0000001.txt").write_text("1:\n5,3,2005-09-06\n")
    assert load_path(tmp_path / "nf").name == "netflix"


def test_resolve_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown dataset 'nonsense'"):
        resolve("nonsense")
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        resolve(str(tmp_path / "missing" / "u.data"))
    with pytest.raises(FileNotFoundError):
        resolve("ratings.csv")
    with pytest.raises(ValueError, match="empty"):
        resolve("  ")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="cannot tell the dataset format"):
        resolve(str(tmp_path / "empty"))
    (tmp_path / "x.bin").write_bytes(b"\x00\x01")
    with pytest.raises(ValueError, match="load_csv"):
        resolve(str(tmp_path / "x.bin"))
    with pytest.raises(TypeError):
        resolve("tiny", bogus=1)  # unknown options are not swallowed
