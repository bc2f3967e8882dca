"""Tests written from a hand mutation-testing pass over the orchestration layer (sweeps, their
grids and folders, parameters, ``--set``, configuration files, the command line): each one fails
with a specific mutant of the code applied (named in its docstring) and checks the code against
an independent computation (hand-made folders and files, the file system's state, hand-computed
grids and messages), never against the function's own output. tests/test_experiment_mutants.py
holds the earlier pass's."""

import pytest

# ---------------------------------------------------------------------------------------------
# parameters


def test_resolve_config_keeps_the_checked_values_not_the_given_ones():
    """Mutant: ``resolve_config`` checking an override but keeping it as given: through the API a
    text ``"3"`` for an int parameter reached the scenario as a str, an int for a float parameter
    stayed an int and a tuple for a list parameter a tuple (the docstring of ``check_value``: the
    value normalised); ``resolve_config`` skipping an unknown key (a typo ran the default)."""
    from types import ModuleType

    from fedsim.experiment import UsageError
    from fedsim.experiment.params import Param, resolve_config

    mod = ModuleType("fedsim_scenario_x")
    mod.PARAMS = {"k": Param(1), "lr": Param(0.5), "l": Param([1, 2]), "name": Param("a")}
    cfg = resolve_config(mod, {"k": "3", "lr": 2, "l": (4, 5)})
    assert cfg == {"k": 3, "lr": 2.0, "l": [4, 5], "name": "a"}
    assert [type(cfg[k]) for k in ("k", "lr", "l")] == [int, float, list]
    with pytest.raises(UsageError) as raised:  # (not skipped: a typo ran the default)
        resolve_config(mod, {"zz": 1})
    assert str(raised.value) == "unknown parameter 'zz' for scenario x (known: k, l, lr, name; see fedsim run x --help)"


def test_params_from_keeps_a_scenarios_own_defaults():
    """Mutant: ``params_from`` ignoring its ``defaults`` (every parameter the configuration's
    default: a scenario's fewer rounds were the paper's)."""
    from fedsim.experiment.params import params_from
    from fedsim.protocols.fedrec import FedRecConfig

    full = FedRecConfig()
    ps = params_from(FedRecConfig, "T", "lr", T=2)
    assert list(ps) == ["T", "lr"]
    assert (ps["T"].default, ps["lr"].default) == (2, full.lr)
    assert ps["T"].default != full.T


def test_a_value_not_among_the_choices_is_named_once_quoted():
    """Mutant: the value in ``--set k: ... is not one of`` quoted a second time (``"'x'"``):
    ConfigError's message already gives it as its repr."""
    from fedsim.experiment import UsageError
    from fedsim.experiment.params import Param, parse_value

    with pytest.raises(UsageError, match=r"^--set k: 'x' is not one of a, b$"):
        parse_value("k", "x", Param("a", choices=("a", "b")))
    with pytest.raises(UsageError, match=r"^--set k: 4 is not one of 1, 2$"):
        parse_value("k", "1,4", Param([1], choices=(1, 2)))


# ---------------------------------------------------------------------------------------------
# configuration files


def test_a_config_file_without_tables_gives_them_empty(tmp_path):
    """Mutant: ``load_config`` returning only the tables the file has (its docstring: missing
    ones empty): ``doc["params"]`` of a file without ``[params]`` was a KeyError."""
    from fedsim.experiment.configfile import load_config

    f = tmp_path / "run.toml"
    f.write_text("seed = 1\n")
    doc = load_config(f)
    assert (doc["params"], doc["network"], doc["seed"]) == ({}, {}, 1)
    assert "grid" not in doc
    assert load_config(f, sweep=True)["grid"] == {}


# ---------------------------------------------------------------------------------------------
# sweeps: a point folder's state


def _finished_point(d, saved: dict) -> None:
    """A point folder as a finished run leaves it: results.json (with ``finished``), its tables,
    report.md."""
    import json

    d.mkdir(parents=True, exist_ok=True)
    (d / "results.json").write_text(json.dumps({"finished": "2026-01-01T00:00:00", "tables": ["t"], **saved}))
    (d / "t.csv").write_text("m\n1\n")
    (d / "report.md").write_text("# x\n")


def test_a_point_folder_without_results_or_error_is_corrupt_not_missing(tmp_path):
    """Mutant: ``_folder_state`` calling a folder missing when it holds neither results.json nor
    error.txt (what a run killed outright may leave, or a stray file): the point was run, but not
    counted among the points run again, and its folder not cleared first."""
    import errno
    import os

    from fedsim.studies.sweep import _folder_state

    d = tmp_path / "x=1"
    d.mkdir()
    (d / "t.csv").write_text("m\n1\n")
    state, detail = _folder_state(d, {"config": {"x": 1}})
    assert state == "corrupt"
    assert detail == (f"results.json unreadable or incomplete ([Errno {errno.ENOENT}] "
                      f"{os.strerror(errno.ENOENT)}: '{d / 'results.json'}')")
    assert _folder_state(tmp_path / "x=2", {"config": {"x": 2}}) == ("missing", "")


def test_a_point_folder_of_another_seed_data_or_scenario_is_stale(tmp_path):
    """Mutant: ``_folder_state`` comparing the point's configuration but not its seed (a sweep
    re-run with ``--seed 1`` into the same ``--out`` took the points of seed 0 for its own).
    Every key of the point's configuration counts, each named with its old and new value."""
    from fedsim.studies.sweep import _folder_state

    key = {"scenario": "demo", "config": {"x": 1}, "data": "tiny", "seed": 0, "network": {"profile": "lan"}}
    d = tmp_path / "x=1"
    _finished_point(d, key)
    assert _folder_state(d, key) == ("done", "")
    assert _folder_state(d, {**key, "seed": 1}) == ("stale", "seed=0, now 1")
    assert _folder_state(d, {**key, "data": "ml100k-like"}) == ("stale", "data=tiny, now ml100k-like")
    assert _folder_state(d, {**key, "scenario": "other"}) == ("stale", "scenario=demo, now other")
    assert _folder_state(d, {**key, "seed": 2, "config": {"x": 3}}) == ("stale", "x=1, now 3; seed=0, now 2")


def _script(tmp_path, body: str):
    script = tmp_path / "scn.py"
    script.write_text("from fedsim.experiment import Param\nPARAMS = {'x': Param(0, 'x')}\n" + body)
    return script


@pytest.mark.parametrize("n", [3, 4])
def test_the_refusal_of_stale_points_shows_three_and_counts_the_rest(tmp_path, n):
    """Mutant: ``(and N more)`` said from 3 stale points on (``>= 3``): three points, all shown,
    were followed by "(and 0 more)". Hand-made finished folders of another scenario."""
    from fedsim.experiment import UsageError
    from fedsim.studies.sweep import run_sweep

    script = _script(tmp_path, "def run(ctx):\n    ctx.table('t', [{'m': 1}])\n")
    out = tmp_path / "sw"
    out.mkdir()
    (out / "sweep.json").write_text("{}\n")
    for x in range(1, n + 1):
        _finished_point(out / f"x={x}", {"scenario": "old"})
    with pytest.raises(UsageError) as raised:
        run_sweep(str(script), {"x": list(range(1, n + 1))}, out, workers=1)
    msg = str(raised.value)
    assert msg.startswith(f"{out} holds {n} point(s) run with another configuration (x=1: scenario=old, now scn; ")
    assert msg.endswith("); use --force to re-run them, or another --out")
    assert ("(and " in msg, " (and 1 more)); use --force" in msg) == (n == 4, n == 4)
    assert [f"x={x}: " in msg for x in range(1, n + 1)] == [True, True, True] + [False] * (n - 3)
    assert sorted(p.name for p in out.iterdir()) == ["sweep.json"] + [f"x={x}" for x in range(1, n + 1)]


def test_a_point_folder_name_is_refused_when_a_runs_temporary_folder_beside_it_could_not_be_named(tmp_path):
    """Bug (and the mutant ``>= 255``): the sweep refused a point's folder name over 255 bytes,
    but a point's run first writes ``.NAME.partial-PID-XXXXXX`` beside it (and a forced re-run
    moves the old one to ``.NAME.replaced-PID-XXXXXX``), 24 to 25 bytes longer: a name of 240
    bytes passed, and each such point failed after the sweep had started ("cannot write there
    (File name too long)"). The longest name allowed is 255 - 25 = 230 bytes: a point of 230
    runs; one of 231 refuses the sweep before anything is written."""
    import json

    from fedsim.experiment import UsageError
    from fedsim.studies.sweep import run_sweep

    script = tmp_path / "scn.py"
    script.write_text("from fedsim.experiment import Param\nPARAMS = {'s': Param('a', 's')}\n"
                      "def run(ctx):\n    ctx.table('t', [{'m': len(ctx['s'])}])\n")
    out = tmp_path / "sw"
    with pytest.raises(UsageError) as raised:
        run_sweep(str(script), {"s": ["b" * 229]}, out, workers=1)  # "s=" + 229: 231 bytes
    assert str(raised.value) == ("the point s=" + "b" * 229 + "'s folder name is 231 bytes long, over the 230 a "
                                 "run's folder may have (the file system's 255 less the suffix of the temporary "
                                 "folder a run writes beside it); use shorter grid values")
    assert not out.exists()
    s = run_sweep(str(script), {"s": ["b" * 228]}, out, workers=1)
    name = "s=" + "b" * 228
    assert (s["done"], s["failed"]) == ([{"s": "b" * 228}], [])
    assert len(name.encode()) == 230
    assert json.loads((out / name / "results.json").read_text())["config"] == {"s": "b" * 228}
    # and a forced re-run of it (another seed: its old folder moved aside under a longer name) too
    s = run_sweep(str(script), {"s": ["b" * 228]}, out, workers=1, seed=1, force=True)
    assert (s["done"], s["rerun"], s["failed"]) == ([{"s": "b" * 228}], [{"s": "b" * 228}], [])
    assert json.loads((out / name / "results.json").read_text())["seed"] == 1


@pytest.mark.parametrize("n", [5, 6])
def test_report_md_names_five_failed_points_and_marks_more(tmp_path, n):
    """Mutants: report.md's ``...`` after the failed points shown from 5 failed on (``>= 5``):
    five failed points, all named, were followed by ``...``; sweep.json's ``workers`` None when
    none was given (the pool used one per core: ``os.cpu_count()``, recorded so)."""
    import json
    import os

    from fedsim.studies.sweep import run_sweep

    script = _script(tmp_path, "def run(ctx):\n    raise RuntimeError('no')\n")
    out = tmp_path / "sw"
    s = run_sweep(str(script), {"x": list(range(1, n + 1))}, out)
    assert len(s["failed"]) == n and s["done"] == []
    named = ", ".join(f"`x={x}`" for x in range(1, 6)) + (" ..." if n > 5 else "")
    assert (f"0 of {n} points finished. **Incomplete: {n} point(s) failed** ({named}; each folder's error.txt "
            "has the error)") in (out / "report.md").read_text()
    assert json.loads((out / "sweep.json").read_text())["workers"] == max(1, os.cpu_count() or 1)


def test_default_workers_is_one_per_core(monkeypatch):
    """Mutant: ``default_workers`` leaving a core free (``cpu_count() - 1``): the docstrings
    (``run_sweep``, ``fedsim sweep --help``) say one per core; one when the count is unknown."""
    import os

    from fedsim.studies.parallel import default_workers

    for cores, want in ((8, 8), (1, 1), (None, 1)):
        monkeypatch.setattr(os, "cpu_count", lambda c=cores: c)
        assert default_workers() == want


# ---------------------------------------------------------------------------------------------
# sweeps: grids


def test_a_grid_of_python_values_is_checked_like_grid_text():
    """Mutants of ``check_grid``/``_run_axis_value``: a seed of 1.5 taken as seed 1; TOML's
    ``true`` taken as seed 1 or loss 1.0; an axis with no values (a sweep of no point); a string
    given for an axis's values (its characters taken for values). Run-option values come back
    typed (a seed of 2.0 as 2, a loss of 0 as 0.0), list values as lists."""
    from types import ModuleType

    from fedsim.experiment import UsageError
    from fedsim.experiment.params import Param
    from fedsim.studies.sweep import check_grid

    mod = ModuleType("fedsim_scenario_x")
    mod.PARAMS = {"x": Param(0), "l": Param([1])}
    got = check_grid(mod, {"seed": [0, 2.0], "loss": [0, 1], "x": [1, "2"], "l": [(1, 2), [3]]})
    assert got == {"seed": [0, 2], "loss": [0.0, 1.0], "x": [1, 2], "l": [[1, 2], [3]]}
    assert [type(v) for v in got["seed"] + got["loss"]] == [int, int, float, float]
    for grid, msg in (({"seed": [1.5]}, "--grid seed: expected a non-negative integer, got 1.5"),
                      ({"seed": [True]}, "--grid seed: expected a non-negative integer, got True"),
                      ({"loss": [True]}, "--grid loss: expected a probability in [0, 1], got True"),
                      ({"x": []}, "--grid x: no values"),
                      ({"x": "12"}, "grid x: expected a list of values, got '12'"),
                      ({"data": [""]}, "--grid data: expected a name, got ''")):
        with pytest.raises(UsageError) as raised:
            check_grid(mod, grid)
        assert str(raised.value) == msg


def test_the_one_point_of_an_empty_grid_has_its_own_folder_named_default(tmp_path):
    """Mutant: ``point_label`` of no axes the empty string: the point's folder was the sweep's
    folder itself, its run (with force) moved the sweep's files aside and its results.json,
    tables and report.md replaced the sweep's."""
    import json

    from fedsim.studies.sweep import point_dir_name, point_label, run_sweep

    assert (point_label({}), point_dir_name({})) == ("default", "default")
    script = _script(tmp_path, "def run(ctx):\n    ctx.table('t', [{'m': 7}])\n")
    out = tmp_path / "sw"
    s = run_sweep(str(script), {}, out, workers=1)
    assert s["done"] == [{}]
    assert sorted(p.name for p in out.iterdir()) == [".sweep.lock", "combined_t.csv", "default", "report.md",
                                                     "sweep.json", "sweep.log"]
    assert json.loads((out / "default" / "results.json").read_text())["config"] == {"x": 0}
    assert (out / "default" / "t.csv").read_text().splitlines() == ["m", "7"]
    assert "| done |" in (out / "report.md").read_text() and "[default](default/report.md)" in (
        out / "report.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scn.py", "sw"]


def test_list_parameters_separate_grid_values_with_semicolons():
    """Mutant: ``parse_grid`` splitting a list-of-text parameter's values at ``,`` (only lists of
    numbers at ``;``): ``--grid models='a;b,c'`` was the two values ``a;b`` and ``c``, not
    ``[a]`` and ``[b, c]``."""
    from types import ModuleType

    from fedsim.experiment.params import Param
    from fedsim.studies.sweep import parse_grid

    mod = ModuleType("fedsim_scenario_x")
    mod.PARAMS = {"m": Param(["a"]), "n": Param([1]), "f": Param([0.5]), "x": Param(0)}
    assert parse_grid(mod, ["m=a;b,c", "n=1,2;3", "f=0.5;1,2", "x=1,2", "seed=3,4"]) == {
        "m": [["a"], ["b", "c"]], "n": [[1, 2], [3]], "f": [[0.5], [1.0, 2.0]], "x": [1, 2], "seed": [3, 4]}


def test_report_md_shows_integer_cells_as_integers(tmp_path):
    """Mutant: ``_num`` reading every cell as a float: report.md's combined table showed a count
    of 10 as ``10.0000``."""
    from fedsim.studies.sweep import run_sweep

    script = _script(tmp_path, "def run(ctx):\n    ctx.table('t', [{'m': ctx['x'] * 10, 'f': ctx['x'] / 4}])\n")
    out = tmp_path / "sw"
    run_sweep(str(script), {"x": [1, 2]}, out, workers=1)
    assert (out / "combined_t.csv").read_text().splitlines() == ["x,m,f", "1,10,0.25", "2,20,0.5"]
    section = (out / "report.md").read_text().split("## t\n", 1)[1].splitlines()
    assert section[3:7] == ["| x | m | f |", "|---|---|---|", "| 1 | 10 | 0.2500 |", "| 2 | 20 | 0.5000 |"]


def test_combine_keeps_the_columns_of_a_table_without_rows(tmp_path):
    """Mutant: ``combine`` skipping a point's table that has a header but no rows: its columns
    were missing from the combined table (their order then that of the next point's), and a
    table no point had rows of got no combined file (the report said nothing of it)."""
    import json

    from fedsim.studies.sweep import combine

    for x, t, u in ((1, "a,b\n", "k\n"), (2, "b,c\n5,6\n", "k\n")):
        d = tmp_path / f"x={x}"
        d.mkdir()
        (d / "results.json").write_text(json.dumps({"finished": "now", "tables": ["t", "u"]}))
        (d / "t.csv").write_text(t)
        (d / "u.csv").write_text(u)
    assert combine(tmp_path, [{"x": 1}, {"x": 2}]) == [str(tmp_path / "combined_t.csv"),
                                                       str(tmp_path / "combined_u.csv")]
    assert (tmp_path / "combined_t.csv").read_text().splitlines() == ["x,a,b,c", "2,,5,6"]
    assert (tmp_path / "combined_u.csv").read_text().splitlines() == ["x,k"]


def test_a_scenarios_check_refusing_some_points_names_them_and_counts_them(tmp_path):
    """Mutants: ``_check_points`` saying "(all N points of the sweep to run ...)" when its one
    message refused only some of them; without "and N more" after the five points it names.
    Nothing is written either way."""
    from fedsim.config import ConfigError
    from fedsim.studies.sweep import run_sweep

    script = _script(tmp_path, "from fedsim.config import ConfigError\n"
                               "def check(config, load, given):\n"
                               "    if config['x'] % 2 == 0:\n        raise ConfigError('x must be odd', 'x')\n"
                               "def run(ctx):\n    ctx.table('t', [{'m': 1}])\n")
    out = tmp_path / "sw"
    with pytest.raises(ConfigError) as raised:
        run_sweep(str(script), {"x": [1, 2, 3, 4]}, out, workers=1)
    assert str(raised.value) == ("2 of the 4 points of the sweep to run would be refused, so none was run: "
                                 "x=2; x=4: x must be odd (leave those values out of the grid, or set what the "
                                 "message says)")
    assert raised.value.key == "x"
    with pytest.raises(ConfigError) as raised:  # 7 of 14: five shown
        run_sweep(str(script), {"x": list(range(1, 15))}, out, workers=1)
    assert str(raised.value).startswith("7 of the 14 points of the sweep to run would be refused, so none was run: "
                                        "x=2; x=4; x=6; x=8; x=10 and 2 more: x must be odd (leave")
    with pytest.raises(ConfigError) as raised:
        run_sweep(str(script), {"x": [2, 4]}, out, workers=1)
    assert str(raised.value) == "x must be odd (all 2 points of the sweep to run; none was run)"
    assert not out.exists()


def test_the_plots_show_each_points_last_round_against_the_axis_that_varies(tmp_path, monkeypatch):
    """Mutants of ``_plot_table``: a per-round table plotted at each point's *first* round (its
    minimum, not its maximum); the x axis the first grid axis even when it has one value (one
    dot per line) rather than the first that varies. Hand-computed: m = 10 x + round, rounds 0
    to 2, so the last round's values are 12 and 22 against x = 1, 2, one line for y=5."""
    pytest.importorskip("matplotlib")
    from matplotlib.axes import Axes

    from fedsim.studies.sweep import run_sweep

    drawn = []
    real_plot, real_xlabel = Axes.plot, Axes.set_xlabel

    def plot(self, xs, ys, *args, **kwargs):
        drawn.append((self.get_title(), kwargs.get("label"), list(xs), list(ys)))
        return real_plot(self, xs, ys, *args, **kwargs)

    def set_xlabel(self, text, *args, **kwargs):
        drawn.append(("xlabel", text))
        return real_xlabel(self, text, *args, **kwargs)

    monkeypatch.setattr(Axes, "plot", plot)
    monkeypatch.setattr(Axes, "set_xlabel", set_xlabel)
    script = tmp_path / "scn.py"
    script.write_text("from fedsim.experiment import Param\nPARAMS = {'x': Param(0), 'y': Param(0)}\n"
                      "def run(ctx):\n"
                      "    ctx.table('t', [{'round': r, 'm': 10 * ctx['x'] + r} for r in (2, 0, 1)])\n")
    out = tmp_path / "sw"
    run_sweep(str(script), {"y": [5], "x": [1, 2]}, out, workers=1)
    assert drawn == [("", "y=5", [1.0, 2.0], [12.0, 22.0]), ("xlabel", "x")]
    assert "![sweep_t_m.png](sweep_t_m.png)" in (out / "report.md").read_text()


def test_run_sweep_refuses_an_unknown_fixed_parameter_by_name(tmp_path):
    """Mutant: ``run_sweep`` not checking its ``fixed`` parameters' names: an unknown one was a
    ``KeyError: 'z'`` from the parameter lookup, not the usage error naming it."""
    from fedsim.experiment import UsageError
    from fedsim.studies.sweep import run_sweep

    script = _script(tmp_path, "def run(ctx):\n    ctx.table('t', [{'m': 1}])\n")
    with pytest.raises(UsageError) as raised:
        run_sweep(str(script), {"x": [1]}, tmp_path / "sw", fixed={"z": 1})
    assert str(raised.value) == "unknown parameter 'z' for scenario scn (known: x; see fedsim run scn --help)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scn.py"]


def test_a_folders_axis_order_is_kept_only_for_the_same_axes(tmp_path):
    """Mutant: ``_axes_in_order_of`` taking the folder's order when its sweep's axes are a subset
    of the new grid's: the new axis was dropped from the grid (its points never run)."""
    import json

    from fedsim.studies.sweep import _axes_in_order_of

    (tmp_path / "sweep.json").write_text(json.dumps({"grid": {"x": [1], "y": [2]}}))
    assert list(_axes_in_order_of(tmp_path, {"y": [3], "x": [4]}).items()) == [("x", [4]), ("y", [3])]
    grid = {"z": [5], "y": [3], "x": [4]}
    assert list(_axes_in_order_of(tmp_path, grid).items()) == [("z", [5]), ("y", [3]), ("x", [4])]
    assert list(_axes_in_order_of(tmp_path, {"y": [3]}).items()) == [("y", [3])]


def test_sweep_json_records_each_points_wall_time_from_its_run(tmp_path):
    """Mutant: a point's result with a wall time of 0 rather than its run's (results.json's
    ``wall_time_s``): sweep.json and report.md's points table said every point took no time."""
    import json

    from fedsim.studies.sweep import run_sweep

    script = _script(tmp_path, "import time\ndef run(ctx):\n    time.sleep(0.2)\n    ctx.table('t', [{'m': 1}])\n")
    out = tmp_path / "sw"
    run_sweep(str(script), {"x": [1, 2]}, out, workers=1)
    points = json.loads((out / "sweep.json").read_text())["points"]
    for p in points:
        ran = json.loads((out / f"x={p['point']['x']}" / "results.json").read_text())["wall_time_s"]
        assert p["wall_time_s"] == ran >= 0.2


# ---------------------------------------------------------------------------------------------
# the command line


def test_fedsim_sweeps_command_line_wins_over_its_config_file(tmp_path, capsys):
    """Mutants of ``fedsim sweep``: the file's ``workers`` winning over ``--workers``, its
    ``backend`` over ``--backend``, its ``scenario`` over the command line's NAME; a ``--grid``
    axis refused beside the file's ``[params]`` value of the key (the axis replaces it); a
    scenario's own ``workers`` parameter not set to 1 (the sweep's pool already uses the cores);
    the exit status 0 with a failed point; the summary line counting failed points as run, or
    without "(above; ...)". What ran is read back from sweep.json and the point folders."""
    import json

    from fedsim.cli import main

    script = tmp_path / "scn.py"
    script.write_text("from fedsim.experiment import Param\n"
                      "PARAMS = {'x': Param(0), 'y': Param(0), 'workers': Param(4)}\n"
                      "def run(ctx):\n    if ctx['x'] == 9:\n        raise RuntimeError('no')\n"
                      "    ctx.table('t', [{'m': ctx['x']}])\n")
    cfg = tmp_path / "sweep.toml"
    cfg.write_text(f'scenario = "{tmp_path / "missing.py"}"\nworkers = 2\nbackend = "ray"\n'
                   '[params]\nx = 5\ny = 7\n[grid]\nx = [1, 2]\n')
    out = tmp_path / "sw"
    assert main(["sweep", str(script), "--config", str(cfg), "--workers", "1", "--backend", "local", "--grid", "x=3",
                 "--out", str(out), "--quiet"]) == 0
    state = json.loads((out / "sweep.json").read_text())
    assert (state["scenario"], state["workers"], state["backend"], state["grid"]) == ("scn", 1, "local", {"x": [3]})
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("x=")) == ["x=3"]
    assert json.loads((out / "x=3" / "results.json").read_text())["config"] == {"x": 3, "y": 7, "workers": 1}
    capsys.readouterr()
    assert main(["sweep", str(script), "--config", str(cfg), "--backend", "local", "--grid", "x=3,9", "--out",
                 str(out), "--quiet"]) == 1
    captured = capsys.readouterr()
    assert f"failed x=9: RuntimeError: no (traceback in {out}/x=9/error.txt)" in captured.err
    assert captured.out.splitlines() == [
        f"sweep: 2 points, 0 run, 1 already done, 1 failed (above; each in its folder's error.txt, with the traceback of each that raised); "
        f"results in {out}/ (report.md, sweep.json, combined_t.csv)"]
    assert json.loads((out / "sweep.json").read_text())["workers"] == 2  # the file's, without --workers


def test_a_data_error_names_the_config_file_only_when_the_value_came_from_it(tmp_path, capsys, monkeypatch):
    """Mutant: ``_from_config`` naming the configuration file's ``data`` key for a ``--data``
    given on the command line (which overrides the file): the error pointed at a line that was
    not used. Nothing is written either way."""
    from fedsim.cli import main

    monkeypatch.chdir(tmp_path)
    f = tmp_path / "r.toml"
    f.write_text('data = "tiny"\n')
    assert main(["run", "demo", "--config", str(f), "--data", "nosuch", "--out", "o", "--quiet"]) == 2
    assert capsys.readouterr().err == "error: --data nosuch: does not apply, demo makes its own data\n"
    f.write_text('seed = 1\ndata = "nosuch"\n')
    assert main(["run", "demo", "--config", str(f), "--out", "o", "--quiet"]) == 2
    assert capsys.readouterr().err == f"error: {f}: line 2: data: nosuch: does not apply, demo makes its own data\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.toml"]


def test_a_scenario_run_as_a_script_is_named_by_its_files_whole_stem():
    """Mutant: ``scenario_name`` of a module running as ``__main__`` its module name: the script's
    folders and results.json were named ``__main__``."""
    from types import ModuleType

    from fedsim.experiment.naming import scenario_name

    mod = ModuleType("__main__")
    mod.__file__ = "/somewhere/exp.v2.py"
    assert scenario_name(mod) == "exp.v2"
