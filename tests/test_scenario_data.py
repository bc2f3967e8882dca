"""A missing or unreadable --data is one UsageError naming --data (the command line's one
'error: --data: ...' line, exit 2), before any run or worker starts, for every scenario; nothing
is written."""

from __future__ import annotations

import pytest

from fedsim.experiment import UsageError, list_scenarios, load_scenario, run_scenario

NAMES = [name for name, _ in list_scenarios()]


def _one_worker(name: str) -> dict:
    return {"workers": 1} if "workers" in load_scenario(name).PARAMS else {}


@pytest.mark.parametrize("name", NAMES)
def test_a_missing_data_path_is_a_usage_error(name, tmp_path):
    missing = tmp_path / "nope.data"
    with pytest.raises(UsageError) as exc:
        run_scenario(name, data=str(missing), out=tmp_path / "o", overrides=_one_worker(name), quiet=True)
    assert str(exc.value) == f"--data: no such file or folder: {missing}"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", NAMES)
def test_a_file_of_no_known_format_is_a_usage_error(name, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("garbage line\nmore\n")
    with pytest.raises(UsageError) as exc:
        run_scenario(name, data=str(bad), out=tmp_path / "o", overrides=_one_worker(name), quiet=True)
    assert str(exc.value).startswith(f"--data: {bad}: cannot tell the dataset format; the command line reads")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.txt"]


@pytest.mark.parametrize("spec", [{"fpl_data": ["BAD"]}, {}])
def test_privacy_audit_names_the_implicit_dataset_it_cannot_read(spec, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("garbage line\nmore\n")
    over = {"protocols": ["fpl"], "workers": 1, **({"fpl_data": [str(bad)]} if spec else {})}
    with pytest.raises(UsageError) as exc:
        run_scenario("privacy_audit", data=None if spec else str(bad), out=tmp_path / "o", overrides=over,
                     quiet=True)
    opt = "fpl_data" if spec else "--data"
    assert str(exc.value).startswith(f"{opt}: {bad}: cannot tell the dataset format")
