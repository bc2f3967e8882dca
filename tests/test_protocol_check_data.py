"""ProtocolSpec.check_data: a protocol's check of its configuration against the data before the
run, and PersonalFR's / FedAvg-AE's use of it (the default implicit threshold 3.5, for 1-5 stars,
refused on ratings 1 to 10 unless set, as the PersonalFR scenarios refuse it)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fedsim.cli import main
from fedsim.config import ConfigError
from fedsim.experiment import run_scenario
from fedsim.protocols import REGISTRY
from fedsim.protocols.contract import ProtocolSpec
from conftest import anime_like

# small and fast: 12 users in 3 clients, one round of a small autoencoder
FAST = ["--set", "rounds=1", "--set", "clients=3", "--set", "hidden=8", "--set", "local_epochs=1"]


@pytest.mark.parametrize("protocol", ["personalfr", "fedavg-ae"])
def test_fedsim_run_refuses_the_default_implicit_threshold_on_ratings_1_to_10(tmp_path, capsys, protocol):
    # it took 3.5 (meant for 1-5 stars) without a word: ratings 4 to 10 were positives (paper: > 8 on Anime)
    data = anime_like(tmp_path)
    out = tmp_path / "out"
    argv = ["run", protocol, "--data", str(data), "--set", "task=implicit", *FAST, "--out", str(out), "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "error: --set threshold: the data (anime) has ratings 1 to 10, and the default threshold 3.5 (positive: "
        "rating >= threshold) is for 1-5 stars; set it (the paper's Anime, positive above 8: --set threshold=8.5)"]
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["anime"]  # no partial folder left either
    # fedsim compare runs the same configuration on two transports: refused the same way
    assert main(["compare", protocol, "--data", str(data), "--set", "task=implicit", *FAST, "--out",
                 str(tmp_path / "cmp"), "--quiet"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --set threshold: the data (anime) has ratings 1 to 10, and the default threshold 3.5 (positive: "
        "rating >= threshold) is for 1-5 stars; set it (the paper's Anime, positive above 8: --set threshold=8.5)"]
    assert not (tmp_path / "cmp").exists()

    # set, it runs, on the threshold asked for
    assert main(argv + ["--set", "threshold=8.5"]) == 0, capsys.readouterr().err
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["threshold"] == 8.5 and res["config"]["task"] == "implicit"
    # the explicit task never reads the threshold: unchanged
    out2 = tmp_path / "explicit"
    assert main(["run", protocol, "--data", str(data), *FAST, "--out", str(out2), "--quiet"]) == 0, \
        capsys.readouterr().err
    assert json.loads((out2 / "results.json").read_text())["config"]["threshold"] == 3.5


def test_ratings_1_to_5_run_with_the_default_threshold(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", "personalfr", "--data", "tiny", "--set", "task=implicit", *FAST, "--out", str(out),
                 "--quiet"]) == 0, capsys.readouterr().err
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["threshold"] == 3.5 and res["config"]["task"] == "implicit"


def test_the_protocols_check_reads_the_task_the_scale_and_what_was_set(tmp_path):
    from fedsim.data import resolve
    from fedsim.protocols.fedae import FedAEConfig, check_against_data

    ten, five = resolve(str(anime_like(tmp_path))), resolve("tiny")
    assert (float(ten.values.max()), float(five.values.max())) == (10, 5)
    with pytest.raises(ConfigError, match=r"^--set threshold: the data \(anime\) has ratings 1 to 10, ") as exc:
        check_against_data(FedAEConfig(task="implicit"), ten, frozenset())
    assert exc.value.key == "threshold"
    # (clients=0, one user per client: the default 100 clients are more than these data's users, which
    # the check refuses too)
    for cfg, r, given in [(FedAEConfig(task="explicit", clients=0), ten, ()),
                          (FedAEConfig(task="implicit", clients=0), ten, {"threshold"}),
                          (FedAEConfig(task="implicit", threshold=3.5, clients=0), ten, {"threshold"}),
                          (FedAEConfig(task="implicit", clients=0), five, ())]:
        assert check_against_data(cfg, r, frozenset(given)) is None
    for name in ("personalfr", "fedavg-ae"):
        assert REGISTRY[name].check_data is check_against_data


@pytest.fixture
def checked_fedrec():
    """fedrec under another name, with a check_data that records its calls (and raises what
    ``raises`` holds)."""
    calls: list[tuple] = []
    raises: list[Exception] = []
    built: list[int] = []
    base = REGISTRY["fedrec"]

    def check(config, ratings, given):
        calls.append((config, ratings, given))
        if raises:
            raise raises[0]

    def build(*a, **kw):
        built.append(1)
        return base.build(*a, **kw)

    spec = dataclasses.replace(base, name="fedrec-checked", check_data=check, build=build)
    REGISTRY.add(spec)
    try:
        yield calls, raises, built
    finally:
        REGISTRY.remove("fedrec-checked")


def test_check_data_is_called_with_the_config_the_loaded_data_and_the_given_keys(tmp_path, checked_fedrec):
    calls, raises, built = checked_fedrec
    res = run_scenario("fedrec-checked", data="tiny", out=tmp_path / "o", quiet=True,
                       overrides={"T": 2, "lr": 0.5, "test_frac": 0.25})
    assert len(calls) == 1 and built == [1]
    config, ratings, given = calls[0]
    assert type(config) is REGISTRY["fedrec"].Config and (config.T, config.lr) == (2, 0.5)
    assert given == frozenset({"T", "lr", "test_frac"}) and isinstance(given, frozenset)
    assert len(ratings) == 360 and ratings.n_users == 30  # the whole of --data, before the test split
    summary = (tmp_path / "o" / "summary.csv").read_text().splitlines()
    row = dict(zip(summary[0].split(","), summary[1].split(",")))
    assert int(row["train_ratings"]) + int(row["test_ratings"]) == 360 and int(row["test_ratings"]) > 0
    assert res["config"]["T"] == 2

    # a check that refuses: the ConfigError reaches the caller, before build; no output folder
    raises.append(ConfigError("T does not fit", "T"))
    with pytest.raises(ConfigError, match="^T does not fit$"):
        run_scenario("fedrec-checked", data="tiny", out=tmp_path / "o2", quiet=True, overrides={"T": 2})
    assert len(calls) == 2 and calls[1][2] == frozenset({"T"}) and built == [1]
    assert not (tmp_path / "o2").exists()


def test_a_check_data_error_names_the_config_files_line(tmp_path, capsys, checked_fedrec):
    calls, raises, built = checked_fedrec
    raises.append(ConfigError("T = 2 does not fit the data", "T"))
    cfg = tmp_path / "run.toml"
    cfg.write_text('data = "tiny"\n[params]\nT = 2\n')
    out = tmp_path / "out"
    assert main(["run", "fedrec-checked", "--config", str(cfg), "--out", str(out), "--quiet"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: {cfg}: line 3: [params] T: T = 2 does not fit the data"]
    assert calls[0][2] == frozenset({"T"}) and built == [] and not out.exists()


def test_a_spec_refuses_a_check_data_that_is_not_a_function():
    base = REGISTRY["fedrec"]
    with pytest.raises(TypeError, match=r"^protocol 'x': check_data must be a function \(config, ratings, given\) "
                                        r"or None, got 3$"):
        dataclasses.replace(base, name="x", check_data=3)
    assert ProtocolSpec.__dataclass_fields__["check_data"].default is None
    assert all(REGISTRY[n].check_data is None for n in REGISTRY if n not in ("personalfr", "fedavg-ae"))


def test_fedsim_sweep_refuses_once_before_running_any_point(tmp_path, capsys):
    # each point ran and failed with the same ConfigError (an error.txt per point, status 1); the
    # check does not depend on the grid: the sweep now refuses once, and runs (and writes) nothing
    data = anime_like(tmp_path)
    out = tmp_path / "sw"
    base = ["sweep", "personalfr", "--data", str(data), *FAST, "--out", str(out), "--quiet", "--workers", "1"]
    why = ("--set threshold: the data (anime) has ratings 1 to 10, and the default threshold 3.5 (positive: rating "
           ">= threshold) is for 1-5 stars; set it (the paper's Anime, positive above 8: --set threshold=8.5)")
    assert main(base + ["--set", "task=implicit", "--grid", "seed=0,1,2"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: {why} (all 3 points of the sweep to run; none was run)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["anime"]

    # a check that depends on an axis: the points it refuses named, still nothing run
    assert main(base + ["--grid", "task=explicit,implicit", "--grid", "seed=0,1"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: 2 of the 4 points of the sweep to run would be refused, so none was run: task=implicit,seed=0; "
        f"task=implicit,seed=1: {why} (leave those values out of the grid, or set what the message says)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["anime"]

    # the threshold as a grid axis is set by the user: every point runs on the value asked for
    assert main(base + ["--set", "task=implicit", "--grid", "threshold=3.5,8.5"]) == 0, capsys.readouterr().err
    for t in (3.5, 8.5):
        assert json.loads((out / f"threshold={t}" / "results.json").read_text())["config"]["threshold"] == t


def test_fedsim_trace_checks_the_configuration_against_the_presets_data(tmp_path, capsys, checked_fedrec):
    # fedsim trace called spec.build itself: check_data was never called, whatever --set gave
    calls, raises, built = checked_fedrec
    out = tmp_path / "tr"
    argv = ["trace", "fedrec-checked", "--set", "lr=0.5", "--out", str(out), "--html"]
    assert main(argv) == 0, capsys.readouterr().err
    assert len(calls) == 1 and built == [1]
    config, ratings, given = calls[0]
    preset, _ = REGISTRY["fedrec"].tiny(3, 1, 0)
    assert type(config) is REGISTRY["fedrec"].Config and config.lr == 0.5
    assert given == frozenset({"lr"}) and isinstance(given, frozenset)
    assert len(ratings) == len(preset) and ratings.n_users == preset.n_users
    capsys.readouterr()
    # refused: one error line naming the protocol, before build; no folder, no partial folder
    raises.append(ConfigError("lr = 0.5 does not fit the data", "lr"))
    assert main(argv[:-3] + ["--out", str(tmp_path / "tr2"), "--html"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["error: fedrec-checked: lr = 0.5 does not fit the data"]
    assert len(calls) == 2 and built == [1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tr"]


def test_privacy_capture_checks_the_configuration_when_told_what_was_given(tmp_path):
    # fedsim.privacy.capture called spec.build itself: PersonalFR's implicit task ran on ratings 1
    # to 10 with the threshold 3.5 meant for 1-5 stars, nothing said
    from fedsim.data import resolve
    from fedsim.privacy import capture
    from fedsim.protocols.fedae import FedAEConfig

    ten = resolve(str(anime_like(tmp_path)))
    cfg = FedAEConfig(task="implicit", rounds=1, clients=3, hidden=(8,), local_epochs=1)
    with pytest.raises(ConfigError, match=r"^--set threshold: the data \(anime\) has ratings 1 to 10, ") as exc:
        capture("personalfr", ten, cfg, given={"task", "rounds", "clients", "hidden", "local_epochs"})
    assert exc.value.key == "threshold"
    # the threshold chosen: checked and run; given left out: not checked, as spec.build
    cap = capture("personalfr", ten, cfg.replace(threshold=8.5), given={"task", "threshold"})
    assert cap.config.threshold == 8.5 and len(cap.truth) == 3 and len(cap.result.ledger) > 0
    assert capture("personalfr", ten, cfg).config.threshold == 3.5
