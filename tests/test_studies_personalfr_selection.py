"""PersonalFR: the reported round is chosen on a validation split cut from training data, never on
the test split, and applied to every repetition's test curve."""

import numpy as np
import pytest

from fedsim.experiment import run_scenario
from fedsim.studies.personalfr import load_task
from fedsim.studies.personalfr.runs import split
from conftest import anime_like


def _keys(r):
    return set((np.asarray(r.users, np.int64) * 100_000 + np.asarray(r.items, np.int64)).tolist())


def test_the_validation_split_is_cut_from_the_training_part_only():
    _, tr, te = split("tiny", 3, 0.2)
    _, tr2, va = split("tiny", 3, 0.2, val_frac=0.25)
    assert _keys(tr2) | _keys(va) == _keys(tr) and not _keys(tr2) & _keys(va)
    assert not (_keys(tr2) | _keys(va)) & _keys(te)
    assert len(va.users) > 0
    # the validation task evaluates on the validation entries and trains on the rest
    t = load_task("tiny", 3, "explicit", 3.5, 0.2, 0.25)
    ev = set((np.repeat(np.arange(t.n_users), np.diff(t.test_ptr)) * 100_000 + t.test_items).tolist())
    assert ev == _keys(va)
    rows, cols = np.nonzero(t.mask)
    assert set((rows * 100_000 + cols).tolist()) == _keys(tr2)


def test_selected_round_comes_from_the_validation_run(tmp_path):
    import csv

    res = run_scenario("personalfr_table3", data="tiny", out=tmp_path, seed=2, quiet=True,
                       overrides={"clients": [4], "rounds": 6, "eval_every": 2, "tasks": ["explicit"], "repeats": 2,
                                  "methods": ["personalfr"], "workers": 1})
    assert "results" in res["tables"]
    rows = list(csv.DictReader(open(tmp_path / "results.csv")))
    assert len(rows) == 1 and rows[0]["selected_on"] == "validation" and rows[0]["repeats"] == "2"
    curves = [r for r in csv.DictReader(open(tmp_path / "results_curves.csv"))]
    rnd = rows[0]["selected_round"]
    at = [float(r["rmse"]) for r in curves if r["round"] == rnd]
    assert len(at) == 2  # the two test runs, not the validation run
    assert float(rows[0]["selected"]) == pytest.approx(np.mean(at))
    assert float(rows[0]["selected_std"]) == pytest.approx(np.std(at))
    # the paper's rule is still there, and reported as such
    res = run_scenario("personalfr_table3", data="tiny", out=tmp_path / "t", seed=2, quiet=True,
                       overrides={"clients": [4], "rounds": 6, "eval_every": 2, "tasks": ["explicit"], "repeats": 2,
                                  "methods": ["personalfr"], "workers": 1, "select_on": "test"})
    row = list(csv.DictReader(open(tmp_path / "t" / "results.csv")))[0]
    assert row["selected_on"] == "test" and row["selected"] == row["best_on_test"]


def test_runs_start_longest_first_and_come_back_in_spec_order():
    from fedsim.protocols.personalfr import FedAEConfig
    from fedsim.studies.personalfr.runs import RunSpec, run_spec, spec_cost
    from fedsim.studies.parallel import pmap

    cfg = FedAEConfig(rounds=800)
    common = dict(data="tiny", seed=0, task="explicit", threshold=3.5, test_frac=0.2, cfg=cfg)
    kinds = [RunSpec("joint", **common), RunSpec("personalfr", M=100, **common), RunSpec("fedavg", M=100, **common),
             RunSpec("personalfr", M=300, **common), RunSpec("fedavg", M=300, **common)]
    # the order of their measured durations on ML-100K (docs/performance.md): 44, 53, 66, 87, 155 s
    costs = [spec_cost(s) for s in kinds]
    assert costs == sorted(costs) and len(set(costs)) == 5
    # what execute does: results in spec order whatever the start order
    small = FedAEConfig(rounds=2, eval_every=1)
    specs = [RunSpec("personalfr", M=2, **dict(common, cfg=small)), RunSpec("fedavg", M=3, **dict(common, cfg=small))]
    two = pmap(run_spec, specs, 2, cost=spec_cost)
    one = [run_spec(s) for s in specs]
    assert [o["method"] for o in two] == ["personalfr", "fedavg"]
    assert [o["history"] for o in two] == [o["history"] for o in one]


def test_verdicts_list_client_counts_in_numeric_order():
    # sorted as text, M = 100 came before M = 20
    from fedsim.studies.personalfr.report import verdicts

    class Notes:
        def __init__(self):
            self.text = []

        def note(self, text):
            self.text.append(text)

    rows = [{"task": "explicit", "method": m, "clients": c, "selected": v}
            for c in ("100", "20", "all", "5") for m, v in (("fedavg", 1.0), ("personalfr", 0.9))]
    ctx = Notes()
    verdicts(ctx, rows)
    order = [line.split("M = ")[1].split(":")[0] for line in ctx.text[0].splitlines() if "M = " in line]
    assert order == ["5", "20", "100", "all"]


class _Ctx:
    """What result_tables and verdicts use of a RunContext."""

    def __init__(self, out):
        self.out, self.tables, self.notes, self.caveats = out, {}, [], []

    def table(self, name, rows, **kw):
        self.tables[name] = rows

    def note(self, text):
        self.notes.append(text)

    def caveat(self, word, text):
        self.caveats.append(word)
        self.notes.append(text)


def _joint(seed, curve):
    hist = [{"round": r, "rmse": v} for r, v in curve]
    vals = [v for _, v in curve]
    finite = [v for v in vals if v == v]
    best = min(finite) if finite else float("nan")
    return {"task": "explicit", "method": "joint", "M": 0, "seed": seed, "n_users": 10, "validation": False,
            "history": hist, "best": best, "final": vals[-1],
            "best_round": next((r for r, v in curve if v == best), None), "rounds": 4, "wall_s": 1.0}


def test_a_repeat_without_a_figure_is_not_averaged_away(tmp_path):
    # repeat 2's last evaluation is NaN: its final figure used to be dropped and the row said
    # final = mean of the other two, under repeats = 3
    from fedsim.studies.personalfr.report import result_tables, verdicts

    outs = [_joint(0, [(2, 0.95), (4, 0.90)]), _joint(1, [(2, 0.85), (4, 0.80)]),
            _joint(2, [(2, 0.70), (4, float("nan"))])]
    ctx = _Ctx(tmp_path)
    row = result_tables(ctx, outs, title="t")[0]
    assert row["repeats"] == 3 and row["nan_runs"] == 1
    assert np.isnan(row["final"]) and np.isnan(row["final_std"])
    # every repeat has a best evaluation: mean and population std of 0.90, 0.80, 0.70
    assert row["best_on_test"] == pytest.approx(0.8) and row["best_on_test_std"] == pytest.approx(np.std([0.9, 0.8, 0.7]))
    assert any("seed(s) 2" in n and "NaN" in n for n in ctx.notes)
    assert ctx.caveats == ["nan"]  # (what a sweep reads from results.json: a note alone reached only this report)
    # a NaN figure is not compared (NaN < x is False: it read "FedAvg better")
    rows = [{"task": "explicit", "method": "fedavg", "clients": "5", "selected": float("nan")},
            {"task": "explicit", "method": "personalfr", "clients": "5", "selected": 0.9}]
    vctx = _Ctx(tmp_path)
    verdicts(vctx, rows)
    assert "not compared" in vctx.notes[0] and "better" not in vctx.notes[0]


def test_one_repeat_has_no_standard_deviation(tmp_path):
    from fedsim.studies.personalfr.report import result_tables

    row = result_tables(_Ctx(tmp_path), [_joint(0, [(2, 0.95), (4, 0.90)])], title="t")[0]
    assert row["best_on_test"] == pytest.approx(0.90) and row["final"] == pytest.approx(0.90)
    assert np.isnan(row["best_on_test_std"]) and np.isnan(row["final_std"]) and np.isnan(row["selected_std"])
    assert row["nan_runs"] == 0


@pytest.mark.parametrize("name, over", [
    ("personalfr_table3", {"clients": [4], "rounds": 2, "tasks": ["explicit"], "repeats": 1}),
    ("personalfr_table4", {"rounds": 2, "tasks": ["explicit"], "repeats": 1}),
    ("personalfr_curves", {"clients": [4], "rounds": 2, "tasks": ["explicit"], "repeats": 1}),
    ("personalfr_compression", {"clients": [4], "repeats": 1}),
])
@pytest.mark.parametrize("net, why", [({"loss": 0.2}, "loss 0.2"), ({"dropout": 0.5}, "dropout 0.5")])
def test_personalfr_scenarios_refuse_faults_up_front(name, over, net, why, tmp_path):
    # they run without a deadline: the run ended in a DeadlockError advising a --set deadline these
    # scenarios do not have ("unknown parameter 'deadline'")
    from fedsim.experiment import UsageError
    from fedsim.kernel import NetSpec

    with pytest.raises(UsageError) as exc:
        run_scenario(name, data="tiny", out=tmp_path / "o", net=NetSpec(**net), quiet=True,
                     overrides=dict(over, workers=1))
    # the command it suggests ran into "FedAEConfig.clients = 100 is more than the 30 users of the
    # data" on the data it was given: it names a number of clients the data has now
    assert str(exc.value) == (
        "the PersonalFR scenarios run FedAvg and PersonalFR with no deadline on a network that loses no message; "
        f"this one does ({why}): measure faults with `fedsim run personalfr --set deadline=SECONDS --set clients=30` "
        "(or fedavg-ae) on the same data and network, which reports what was missing (clients: at most the data's "
        "30 users, 0: one user per client)")
    assert list(tmp_path.iterdir()) == []


def test_joint_alone_runs_on_a_lossy_network_and_study_runs_refuse_one():
    # Joint sends no message; a federated study run would read a run that lost messages as a whole one
    from fedsim.kernel import NetSpec
    from fedsim.protocols.personalfr import FedAEConfig
    from fedsim.studies.personalfr.runs import RunSpec, run_spec

    common = dict(data="tiny", seed=0, task="explicit", threshold=3.5, test_frac=0.2,
                  cfg=FedAEConfig(rounds=2, deadline=5.0), profile=NetSpec(loss=0.2))
    for method in ("fedavg", "personalfr"):
        with pytest.raises(ValueError, match=rf"^PersonalFR study runs \({method}\) read whole runs on a network "
                                             r"that loses no message; this one does \(loss 0.2\): measure faults "
                                             r"with `fedsim run personalfr --set deadline=SECONDS --set clients=30` "
                                             r"\(or fedavg-ae\) on the same data"):
            run_spec(RunSpec(method, M=2, **common))
    assert run_spec(RunSpec("joint", joint_epochs=2, joint_batch=10, **common))["rounds"] == 2


@pytest.mark.parametrize("protocol", ["personalfr", "fedavg-ae"])
def test_the_command_a_faulty_network_refusal_suggests_runs_on_its_data(protocol, tmp_path, capsys):
    # the refusal's `fedsim run personalfr --set deadline=SECONDS` (or fedavg-ae) failed on the data
    # it was given (tiny: 30 users, clients 100 by default): the command it names now runs there
    import re
    import shlex

    from fedsim.cli import main
    from fedsim.experiment import UsageError
    from fedsim.kernel import NetSpec

    with pytest.raises(UsageError) as exc:
        run_scenario("personalfr_table3", data="tiny", out=tmp_path / "o", net=NetSpec(loss=0.2), quiet=True,
                     overrides={"workers": 1})
    command = shlex.split(re.search(r"`(fedsim run personalfr [^`]*)`", str(exc.value)).group(1))
    assert command[:3] == ["fedsim", "run", "personalfr"]
    argv = [a.replace("SECONDS", "1") for a in command[1:]]
    argv[1] = protocol
    out = tmp_path / protocol
    assert main(argv + ["--data", "tiny", "--loss", "0.2", "--set", "rounds=2", "--out", str(out), "--quiet"]) == 0, \
        capsys.readouterr().err
    assert (out / "results.json").exists()


@pytest.mark.parametrize("name, over", [
    ("personalfr_table3", {"clients": [2], "rounds": 1, "tasks": ["explicit", "implicit"], "repeats": 1}),
    ("personalfr_compression", {"clients": [2], "rounds": 1, "repeats": 1, "task": "implicit"}),
])
def test_the_default_implicit_threshold_is_refused_on_ratings_above_5(name, over, tmp_path):
    # threshold 3.5 (for 1-5 stars) made 4..10 positive on Anime-like data, silently (paper: > 8 there)
    from fedsim.experiment import UsageError

    data = anime_like(tmp_path)
    with pytest.raises(UsageError) as exc:
        run_scenario(name, data=str(data), out=tmp_path / "o", quiet=True, overrides=dict(over, workers=1))
    assert str(exc.value) == (f"--set threshold: --data {data} has ratings 1 to 10, and the default threshold 3.5 "
                              "(positive: rating >= threshold) is for 1-5 stars; set it (the paper's Anime, positive "
                              "above 8: --set threshold=8.5)")
    assert not (tmp_path / "o").exists()
    # set, it runs (3.5 set on purpose too: test below)
    res = run_scenario(name, data=str(data), out=tmp_path / "o", quiet=True,
                       overrides=dict(over, workers=1, threshold=8.5))
    assert res["config"]["threshold"] == 8.5


def test_the_threshold_check_reads_the_tasks_the_scale_and_what_was_set(tmp_path):
    from fedsim.data import resolve
    from fedsim.experiment import RunContext, UsageError
    from fedsim.studies.personalfr import check_threshold

    def ctx(given=()):
        return RunContext("personalfr_table3", {"threshold": 3.5}, "d", 0, None, tmp_path, given=frozenset(given))

    ten, five = resolve(str(anime_like(tmp_path))), resolve("tiny")
    assert float(ten.values.max()) == 10 and float(five.values.max()) == 5
    with pytest.raises(UsageError, match=r"^--set threshold: --data d has ratings 1 to 10, "):
        check_threshold(ctx(), ten, ("implicit",))
    for c, r, tasks in [(ctx(), ten, ("explicit",)), (ctx({"threshold"}), ten, ("implicit",)),
                        (ctx(), five, ("explicit", "implicit"))]:
        assert check_threshold(c, r, tasks) is None
