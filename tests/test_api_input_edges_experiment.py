"""Bad input at the experiment and studies floor's public entry points (run_scenario,
load_scenario, run_sweep and ``fedsim sweep``, the protocol registry, RunContext, Param) is
refused with an error naming the parameter, key, file or peer; nothing is coerced (``int(1.5)``,
``bool("yes")``) or dropped silently, and no bare built-in error (an ``AttributeError`` from deep
inside, a ``KeyError`` of the key alone) is left to the caller to decode. Each test names what the
call did before. (The kernel's entry points: test_api_input_edges_kernel.py.)"""

from __future__ import annotations

import re

import pytest


# -- run_scenario: what is run, and its overrides ---------------------------------------------

@pytest.mark.parametrize("mod, shown", [(5, "int 5"), (None, "None"), (b"demo", "bytes b'demo'")])
def test_run_scenario_refuses_a_scenario_that_is_no_module_nor_str(tmp_path, mod, shown):
    # 5 was "AttributeError: 'int' object has no attribute '__name__'" (from scenario_name)
    from fedsim.experiment import run_scenario

    shown = "NoneType None" if mod is None else shown
    with pytest.raises(TypeError, match="^" + re.escape("run_scenario takes a scenario module, or a scenario's name "
                                                        f"or path (str), got {shown}") + "$"):
        run_scenario(mod, out=str(tmp_path / "run"), quiet=True)
    assert list(tmp_path.iterdir()) == []


def test_run_scenario_refuses_a_module_that_is_no_scenario(tmp_path):
    # "AttributeError: module 're' has no attribute 'PARAMS'"
    from fedsim.experiment import UsageError, run_scenario

    with pytest.raises(UsageError, match=r"^module re is not a fedsim scenario \(it needs PARAMS and run\(ctx\)\)$"):
        run_scenario(re, out=str(tmp_path / "run"), quiet=True)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("overrides, shown", [
    (["rounds=2"], "list ['rounds=2']; parse_sets(scenario, strings) makes one of key=value strings"),
    ([], "list []; parse_sets(scenario, strings) makes one of key=value strings"),
    (("rounds", 2), "tuple ('rounds', 2); parse_sets(scenario, strings) makes one of key=value strings"),
    ("rounds=2", "str 'rounds=2'"),
])
def test_run_scenario_refuses_overrides_that_are_no_mapping(tmp_path, overrides, shown):
    # a list was "AttributeError: 'list' object has no attribute 'items'"; [] ran with the defaults
    from fedsim.experiment import load_scenario, resolve_config, run_scenario

    message = "^" + re.escape(f"overrides must be a mapping {{parameter: value}}, got {shown}") + "$"
    with pytest.raises(TypeError, match=message):
        run_scenario("demo", out=str(tmp_path / "run"), quiet=True, overrides=overrides)
    with pytest.raises(TypeError, match=message):
        resolve_config(load_scenario("demo"), overrides)
    assert list(tmp_path.iterdir()) == []


def test_run_scenario_refuses_an_override_key_that_is_no_str(tmp_path):
    # {1: 2} was "AttributeError: 'int' object has no attribute 'strip'" (the did-you-mean hint)
    from fedsim.experiment import run_scenario

    with pytest.raises(TypeError, match=r"^overrides: a key is a parameter name \(str\), got int 1$"):
        run_scenario("demo", out=str(tmp_path / "run"), quiet=True, overrides={1: 2})
    assert list(tmp_path.iterdir()) == []
    res = run_scenario("demo", out=str(tmp_path / "run"), quiet=True, overrides={"rounds": 1, "clients": 2})
    assert res["config"]["rounds"] == 1 and res["config"]["clients"] == 2


# -- run_sweep / fedsim sweep: workers ----------------------------------------------------------

@pytest.mark.parametrize("workers, shown", [(1.5, "1.5"), (2.0, "2.0"), (True, "True"), ("2", "'2'"), (0, "0"),
                                            (-1, "-1"), (False, "False")])
def test_run_sweep_refuses_workers_that_are_no_integer_of_at_least_one_before_running_anything(tmp_path, workers,
                                                                                                 shown):
    # int() ran 1.5 and True as one worker (2.0 as two, "2" as two), silently; 0 and False said
    # "at least 1, got 0" / "got False" only after int()
    from fedsim.experiment import UsageError
    from fedsim.studies.sweep import check_workers, run_sweep

    message = f"^--workers must be an integer of at least 1, got {re.escape(shown)}$"
    with pytest.raises(UsageError, match=message):
        run_sweep("demo", {"rounds": [1]}, out=str(tmp_path / "sweep"), workers=workers)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(UsageError, match=f"^sweep.toml: line 2: workers: must be an integer of at least 1, got "
                                         f"{re.escape(shown)}$"):
        check_workers(workers, "sweep.toml: line 2: workers:")


def test_check_workers_takes_none_and_numpy_integers():
    import numpy as np

    from fedsim.studies.sweep import check_workers

    assert check_workers(None) is None
    assert check_workers(np.int64(3)) == 3 and type(check_workers(np.int64(3))) is int
    assert check_workers(1) == 1


@pytest.mark.parametrize("value, expected", [
    ("0", "error: --workers must be an integer of at least 1, got 0"),
    ("-1", "error: --workers must be an integer of at least 1, got -1"),
])
def test_the_cli_refuses_workers_below_one_naming_the_option(tmp_path, value, expected):
    from test_cli_errors import fedsim_cmd, nothing_left, one_error_line

    line = one_error_line(fedsim_cmd("sweep", "demo", "--grid", "rounds=1", "--workers", value, "--out", "sw",
                                     cwd=tmp_path))
    assert line == expected
    nothing_left(tmp_path, tmp_path / "sw")


# -- the registries: one way of saying "already registered", and replace= a bool ---------------------

def test_the_protocol_registry_says_already_registered_as_the_kernel_registries_do():
    # "a protocol named 'fedrec' is already registered" (no word of what has it, nor of
    # replace=True), where a link model's said "(its description); choose another name, or pass
    # replace=True"
    import dataclasses

    from fedsim.kernel import register_link_model
    from fedsim.kernel.sim import FifoLinkModel
    from fedsim.protocols import REGISTRY, register

    builtin = REGISTRY["fedrec"]

    def build(net, data, cfg, **kw):
        raise RuntimeError("not the built-in")

    with pytest.raises(ValueError) as proto:
        register(dataclasses.replace(builtin, build=build))
    assert str(proto.value) == (f"a protocol named 'fedrec' is already registered ({builtin.summary}); "
                                "choose another name, or pass replace=True")
    assert REGISTRY["fedrec"] is builtin

    def fifo():
        return FifoLinkModel()

    with pytest.raises(ValueError) as link:
        register_link_model("fifo", fifo, "mine")
    shape = r"^a (protocol|link model) named '\w+' is already registered \(.+\); choose another name, or pass " \
            r"replace=True$"
    assert re.match(shape, str(proto.value)) and re.match(shape, str(link.value))


def test_an_unknown_protocol_names_the_closest_as_an_unknown_link_model_does():
    from fedsim.kernel import NetworkConfigError
    from fedsim.kernel.registry import LINK_MODEL_REGISTRY
    from fedsim.protocols import REGISTRY

    with pytest.raises(KeyError, match=re.escape(f"\"unknown protocol 'fedre'; known: {', '.join(REGISTRY)}; did you "
                                                 "mean 'fedrec'?\"")):
        REGISTRY["fedre"]
    # (and then, as the command line's unknown protocol message does, where one of one's own comes from)
    with pytest.raises(NetworkConfigError, match=re.escape("; did you mean 'fifo'?; a link model in a file of your own "
                                                           "is loaded with fedsim --plugin FILE (or FEDSIM_PLUGINS=FILE)")
                       + "$"):
        LINK_MODEL_REGISTRY.entry("fifoo")
    with pytest.raises(KeyError, match=re.escape("\"unknown protocol ['fedrec']: a protocol name is a str\"")):
        REGISTRY[["fedrec"]]


@pytest.mark.parametrize("replace", ["no", 1, None])
def test_the_registries_refuse_a_replace_that_is_not_true_or_false(replace):
    # replace="no" replaced the registered entry (the built-in fedrec, the fifo link model)
    import dataclasses

    from fedsim.kernel import register_link_model, register_transport
    from fedsim.kernel.registry import LINK_MODEL_REGISTRY, TRANSPORT_REGISTRY
    from fedsim.kernel.sim import FifoLinkModel
    from fedsim.protocols import REGISTRY, register

    shown = f"{type(replace).__name__} {replace!r}"
    builtin = REGISTRY["fedrec"]
    with pytest.raises(TypeError, match="^" + re.escape(f"register: replace must be True or False, got {shown}") + "$"):
        register(dataclasses.replace(builtin, summary="other"), replace=replace)
    fifo, sim = LINK_MODEL_REGISTRY.entry("fifo"), TRANSPORT_REGISTRY.entry("sim")
    with pytest.raises(TypeError, match="^" + re.escape(f"register_link_model: replace must be True or False, got "
                                                        f"{shown}") + "$"):
        register_link_model("fifo", lambda: FifoLinkModel(), "other", replace=replace)
    with pytest.raises(TypeError, match="^" + re.escape(f"register_transport: replace must be True or False, got "
                                                        f"{shown}") + "$"):
        register_transport("sim", lambda **kw: None, "other", replace=replace)
    assert REGISTRY["fedrec"] is builtin and LINK_MODEL_REGISTRY.entry("fifo") is fifo
    assert TRANSPORT_REGISTRY.entry("sim") is sim


# -- run_scenario / run_sweep: switches, grid and fixed -----------------------------------------------

@pytest.mark.parametrize("kw, message", [
    (dict(force="no"), "force must be True or False, got str 'no'"),
    (dict(ledger="no"), "ledger must be True or False, got str 'no'"),
    (dict(quiet=1), "quiet must be True or False, got int 1"),
    (dict(ledger=None), "ledger must be True or False, got NoneType None"),
    (dict(progress="yes"), "progress must be True, False or None, got str 'yes'"),
])
def test_run_scenario_refuses_switches_that_are_not_true_or_false_before_anything_is_made(tmp_path, kw, message):
    # bool() took force="no" for True (a used out was replaced) and ledger="no" (ledger.csv written)
    from fedsim.experiment import UsageError, run_scenario

    used = tmp_path / "run"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match="^" + re.escape(message) + "$"):
        run_scenario("demo", out=str(used), **{"quiet": True, **kw})
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["keep.txt", "run"]


def test_run_scenario_takes_numpy_bools_as_switches(tmp_path):
    import numpy as np

    from fedsim.experiment import run_scenario

    res = run_scenario("demo", out=str(tmp_path / "run"), quiet=np.bool_(True), ledger=np.bool_(False),
                       overrides={"rounds": 1, "clients": 2})
    assert res["config"]["rounds"] == 1 and not (tmp_path / "run" / "ledger.csv").exists()


@pytest.mark.parametrize("kw, exc_type, message", [
    (dict(grid=[("rounds", [1])]), TypeError,
     "grid must be a mapping {axis: [values]}, got list [('rounds', [1])]; parse_grid(scenario, strings) makes one "
     "of key=v1,v2 strings"),
    (dict(grid="rounds=1,2"), TypeError, "grid must be a mapping {axis: [values]}, got str 'rounds=1,2'"),
    (dict(fixed=["clients=2"]), TypeError,
     "fixed must be a mapping {parameter: value}, got list ['clients=2']; parse_sets(scenario, strings) makes one of "
     "key=value strings"),
    (dict(force="no"), "UsageError", "force must be True or False, got str 'no'"),
    (dict(ledger=1), "UsageError", "ledger must be True or False, got int 1"),
    (dict(quiet=None), "UsageError", "quiet must be True or False, got NoneType None"),
    (dict(out=""), "UsageError", "--out is empty; give a value or leave the option out"),
])
def test_run_sweep_refuses_a_grid_fixed_or_switch_of_the_wrong_kind_before_anything_is_made(tmp_path, monkeypatch, kw,
                                                                                          exc_type, message):
    # a list grid was "'list' object has no attribute 'items'", a list fixed "dictionary update
    # sequence element #0 has length 9; 2 is required"; bool() took force="no" for True; out=""
    # was the default runs/sweep-... folder
    from fedsim.experiment import UsageError
    from fedsim.studies.sweep import run_sweep

    monkeypatch.chdir(tmp_path)
    exc_type = UsageError if exc_type == "UsageError" else exc_type
    args = {"grid": {"rounds": [1]}, "out": str(tmp_path / "sweep"), **kw}
    with pytest.raises(exc_type, match="^" + re.escape(message) + "$"):
        run_sweep("demo", args.pop("grid"), args.pop("out"), workers=1, **args)
    assert list(tmp_path.iterdir()) == []


# -- load_scenario: a file that is no .py file, a name that is no str ---------------------------------

def test_a_toml_file_given_as_the_scenario_says_config(tmp_path):
    # "AttributeError: 'NoneType' object has no attribute 'loader'" (a traceback from fedsim run)
    from fedsim.experiment import UsageError, load_scenario, run_scenario
    from test_cli_errors import fedsim_cmd, one_error_line

    toml = tmp_path / "run.toml"
    toml.write_text('scenario = "demo"\n')
    other = tmp_path / "notes.txt"
    other.write_text("x")
    with pytest.raises(UsageError, match="^" + re.escape(f"{toml} is not a scenario script (a .py file); a TOML run "
                                                         f"or sweep file is read with --config {toml}") + "$"):
        load_scenario(str(toml))
    with pytest.raises(UsageError, match="^" + re.escape(f"{other} is not a scenario script (a .py file)") + "$"):
        run_scenario(str(other), out=str(tmp_path / "run"), quiet=True)
    with pytest.raises(TypeError, match="^" + re.escape("load_scenario takes a scenario's name or path (str), got "
                                                        f"PosixPath {toml!r}"[:129])):
        load_scenario(toml)  # (the value shown in 80 characters at most)
    res = fedsim_cmd("run", "run.toml", cwd=tmp_path)
    assert res.returncode == 2
    assert one_error_line(res) == ("error: run.toml is not a scenario script (a .py file); a TOML run or sweep file "
                                   "is read with --config run.toml")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "run.toml"]


# -- RunContext: table rows and columns, notes and caveats --------------------------------------------

def _ctx(tmp_path):
    from fedsim.experiment import RunContext
    from fedsim.kernel import NetSpec

    out = tmp_path / "out"
    out.mkdir()
    return RunContext(name="x", config={}, data="tiny", seed=4, net=NetSpec(), out=out, quiet=True)


@pytest.mark.parametrize("call, exc_type, message", [
    (lambda c: c.table("t", {"a": 1}), TypeError,
     "table 't': rows is an iterable of dicts (one a row), got dict {'a': 1}; write [row] for a table of one row"),
    (lambda c: c.table("t", [{"a": 1}, [1, 2]]), TypeError, "table 't': row 1 is no dict (column -> value), got list [1, 2]"),
    (lambda c: c.table("t", None), TypeError, "table 't': rows is an iterable of dicts (one a row), got NoneType None"),
    (lambda c: c.table("t", [{"name": 1}], columns="name"), TypeError,
     "table 't': columns is a list of column names, got the str 'name'; write ['name']"),
    (lambda c: c.table("t", [{"a": 1}], title=5), TypeError, "table 't': title must be a str, got int 5"),
    (lambda c: c.table("t", [{"a": 1.5}], floatfmt="zz"), ValueError,
     "table 't': floatfmt 'zz' is no float format spec (as '.4f'): Unknown format code 'z' for object of type 'float'"),
    (lambda c: c.note(5), TypeError, "a note's text is a str, got int 5"),
    (lambda c: c.caveat(5, "text"), TypeError, "a caveat is one word (a str), got int 5"),
    (lambda c: c.caveat(None, "text"), TypeError, "a caveat is one word (a str), got NoneType None"),
    (lambda c: c.caveat("adjusted", 5), TypeError, "caveat 'adjusted': its text is a str, got int 5"),
])
def test_run_context_refuses_tables_notes_and_caveats_of_the_wrong_kind_naming_them(tmp_path, call, exc_type, message):
    # rows {"a": 1} and ["ab"] were "dictionary update sequence element #0 has length 1; 2 is
    # required"; columns="name" made the columns n, a, m, e; caveat(5) recorded the caveat '5';
    # note(5) and floatfmt="zz" failed as report.md was written, after the whole run; title=5 was
    # written as "5"
    ctx = _ctx(tmp_path)
    with pytest.raises(exc_type, match="^" + re.escape(message) + "$"):
        call(ctx)
    assert list((tmp_path / "out").iterdir()) == [] and ctx.tables == [] and ctx.notes == [] and ctx.caveats == []


def test_a_scenario_whose_note_is_no_str_fails_at_the_note_and_leaves_nothing(tmp_path):
    from fedsim.experiment import run_scenario

    script = tmp_path / "noted.py"
    script.write_text("from fedsim.experiment import Param\nPARAMS = {'x': Param(1, 'x')}\n"
                      "def run(ctx):\n    ctx.table('t', [{'x': ctx.config['x']}])\n    ctx.note(5)\n")
    with pytest.raises(TypeError, match="^a note's text is a str, got int 5$") as info:
        run_scenario(str(script), out=str(tmp_path / "run"), quiet=True)
    assert "ctx.note(5)" in "".join(__import__("traceback").format_tb(info.value.__traceback__))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["noted.py"]



@pytest.mark.parametrize("label, exc_type, message", [
    (5, TypeError, "record_network: label must be a str or None, got int 5"),
    (b"sim", TypeError, "record_network: label must be a str or None, got bytes b'sim'"),
    (("sim",), TypeError, "record_network: label must be a str or None, got tuple ('sim',)"),
    ("", ValueError, "record_network: label is empty; give a name, or None for 'network'"),
])
def test_record_network_refuses_a_label_that_is_no_str_naming_it(tmp_path, label, exc_type, message):
    # label=5 was formatted into the ledger's file name (00001-5.csv), b"sim" as 00001-b_sim_.csv;
    # "" became 'network' silently
    from test_api_input_edges_kernel import run_ledger_net

    net = run_ledger_net()
    ctx = _ctx(tmp_path)
    ctx.keep_ledger = True
    with pytest.raises(exc_type, match="^" + re.escape(message) + "$"):
        ctx.record_network(net, label=label)
    assert list((tmp_path / "out").iterdir()) == [] and ctx.ledger_totals == {} and ctx.sim_time == 0.0
    ctx.record_network(net, label="sim")
    ctx.record_network(net)
    assert sorted(p.name for p in (tmp_path / "out" / ".ledgers").iterdir()) == ["00001-sim.csv", "00002-network.csv"]
    assert ctx.ledger_totals["messages"] == 2

# -- Param, Param.of, params_from -------------------------------------------------------------------

@pytest.mark.parametrize("kw, exc_type, message", [
    (dict(kind="integer"), ValueError,
     "Param kind 'integer': expected one of int, float, str, bool, ints, floats, strs, any (or None: the default's "
     "type)"),
    (dict(choices="abc"), TypeError, "Param choices must be a list or tuple of values, got str 'abc'"),
    (dict(min="0"), TypeError, "Param min must be a number or None, got str '0'"),
    (dict(max=True), TypeError, "Param max must be a number or None, got bool True"),
    (dict(help=5), TypeError, "Param help must be a str, got int 5"),
    (dict(none_ok=1), TypeError, "Param none_ok must be True or False, got 1"),
    (dict(exclusive_min="yes"), TypeError, "Param exclusive_min must be True or False, got 'yes'"),
])
def test_a_param_declared_wrong_is_refused_where_it_is_declared(kw, exc_type, message):
    # kind="integer" took any text ("5" stayed a str); choices="abc" took 'a' (its letters were
    # the choices); min="0" failed at the first value checked ("'<' not supported between
    # instances of 'int' and 'str'")
    from fedsim.experiment import Param

    with pytest.raises(exc_type, match="^" + re.escape(message) + "$"):
        Param(1, **kw)


def test_param_of_and_params_from_name_an_unknown_field_and_refuse_stray_defaults():
    # Param.of(config, "round") was a bare KeyError: 'round'; params_from(config, "lr", nope=3)
    # dropped nope silently
    from fedsim.config import fields_of
    from fedsim.experiment import Param, params_from
    from fedsim.protocols import REGISTRY

    cfg = REGISTRY["fedrec"].Config
    fields = ", ".join(f.name for f in fields_of(cfg))
    with pytest.raises(KeyError, match="^" + re.escape(f"\"{cfg.__name__} has no field 'rounds'") + ".*"
                                        + re.escape(f"; fields: {fields}\"") + "$"):
        Param.of(cfg, "rounds")
    with pytest.raises(KeyError, match="^" + re.escape(f"\"{cfg.__name__} has no field 'round'")):
        params_from(cfg, "round")
    with pytest.raises(TypeError, match="^" + re.escape("params_from: defaults for 'nope', which are not among the "
                                                        "parameters made (lr)") + "$"):
        params_from(cfg, "lr", nope=3)
    assert params_from(cfg, "lr", lr=0.5)["lr"].default == 0.5
