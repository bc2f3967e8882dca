"""Tests written from a hand mutation-testing pass over fedsim/experiment, the studies' table
builders and the ledger's summaries: each one fails with a specific mutant of the code applied
(named in its docstring) and checks the code against an independent computation (a hand-made
ledger, hand-computed figures, the file system's own state), never against the function's own
output."""

import os

import pytest

# ---------------------------------------------------------------------------------------------
# report: atomic writes


def test_write_results_flushes_the_temporary_file_to_disk_before_renaming_it(tmp_path, monkeypatch):
    """Mutant: ``write_atomic`` without ``os.fsync``: after a power cut the rename can reach the
    disk before the data, and results.json (the mark of a finished run) be empty. The order of
    the calls is the contract: fsync of the temporary file's descriptor, then ``os.replace``
    onto results.json."""
    from fedsim.experiment import report

    calls = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def replace(a, b):
        calls.append(("replace", str(a), str(b)))
        return real_replace(a, b)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    report.write_results(tmp_path, {"scenario": "x", "n": 1})
    tmp = str(tmp_path / f".results.json.{os.getpid()}.tmp")
    assert calls == [("fsync", tmp), ("replace", tmp, str(tmp_path / "results.json"))]
    assert (tmp_path / "results.json").read_text(encoding="utf-8") == '{\n  "scenario": "x",\n  "n": 1\n}\n'


def test_report_header_names_the_faults_link_model_and_transport(tmp_path):
    """Mutant: the ``, loss P, dropout P`` part of report.md's first line dropped (a run with
    faults read like a run without). The defaults (fifo links, the simulator, no faults) are not
    said; anything else is."""
    from fedsim.experiment.report import write_report

    results = {"scenario": "demo", "data": "tiny", "seed": 3, "profile": "wan", "wall_time_s": 2.0,
               "simulated_time_s": 0.5, "config": {"rounds": 2}, "plots": [], "ledger_totals": {},
               "network": {"link_model": "fair", "transport": "sim", "loss": 0.1, "dropout": 0.25}}
    write_report(tmp_path, results, [], [])
    lines = (tmp_path / "report.md").read_text(encoding="utf-8").splitlines()
    assert lines[2] == ("Data: `tiny`, seed 3, profile `wan`, link model `fair`, loss 0.1, dropout 0.25, "
                        "wall time 2 s, simulated time 500 ms.")
    results["network"] = {"link_model": "fifo", "transport": "sim", "loss": 0.0, "dropout": 0.0}
    write_report(tmp_path, results, [], [])
    assert (tmp_path / "report.md").read_text(encoding="utf-8").splitlines()[2] == (
        "Data: `tiny`, seed 3, profile `wan`, wall time 2 s, simulated time 500 ms.")


def test_human_seconds_truncates_the_minutes_of_an_hour():
    """Mutant: the minutes of a duration over an hour rounded (``round(rest / 60)``) where the
    docstring says truncated: 5,990 s is 1 h 39 min 50 s, written ``1 h 39 min`` (rounding made
    it 1 h 40 min, and 7,170 s ``1 h 60 min``)."""
    from fedsim.experiment.report import human_seconds

    assert human_seconds(5990) == "1 h 39 min"
    assert human_seconds(7170) == "1 h 59 min"
    assert human_seconds(3600 + 30) == "1 h 00 min"


def test_report_ledger_totals_line_by_hand(tmp_path):
    """Mutant: the ledger totals' byte figure read from ``raw_bytes`` (the array payload) instead
    of ``bytes`` (on the wire)."""
    from fedsim.experiment.report import write_report

    results = {"scenario": "demo", "data": "tiny", "seed": 0, "profile": "ideal", "wall_time_s": 1.0,
               "simulated_time_s": 0.0, "config": {}, "plots": [], "network": {},
               "ledger_totals": {"messages": 3, "bytes": 2500, "raw_bytes": 1200}}
    write_report(tmp_path, results, [], [])
    text = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert text.endswith("## Ledger totals\n\n3 messages, 2.5 kB (1.2 kB of array payload; exact counts in "
                         "results.json).\n")


def test_plural_puts_the_noun_in_the_number_its_count_takes(tmp_path):
    # a sweep of one point said "sweep: 1 points", a ledger of one message "1 messages"
    from fedsim.experiment import plural
    from fedsim.experiment.report import write_report

    assert [plural(n, "point") for n in (0, 1, 2)] == ["0 points", "1 point", "2 points"]
    assert [plural(n, "process", "processes") for n in (1, 3)] == ["1 process", "3 processes"]
    assert plural(1024, "user", spec=",") == "1,024 users" and plural(1, "more row") == "1 more row"
    results = {"scenario": "demo", "data": "tiny", "seed": 0, "profile": "ideal", "wall_time_s": 1.0,
               "simulated_time_s": 0.0, "config": {}, "plots": [], "network": {},
               "ledger_totals": {"messages": 1, "bytes": 500, "raw_bytes": 0}}
    write_report(tmp_path, results, [], [])
    text = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert text.endswith("## Ledger totals\n\n1 message, 500 B (0 B of array payload; exact counts in "
                         "results.json).\n")


def test_axes_beyond_layout_are_told_by_either_limit():
    """Mutant: ``_beyond_layout`` testing each axis' lower limit only: axes of 0 to 1e305 were
    taken for axes matplotlib can lay out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedsim.experiment.report import _beyond_layout

    for ylim, beyond in (((0.0, 1.0), False), ((0.0, 1e305), True), ((-1e305, 0.0), True)):
        fig, ax = plt.subplots()
        ax.set_ylim(*ylim)
        assert _beyond_layout(fig) is beyond
        plt.close(fig)


def test_param_default_text_and_a_key_set_twice():
    """Mutants: ``default_text`` writing an empty default as nothing (``--help`` showed
    ``default )``) instead of ``''``; ``parse_sets`` letting a later ``--set k=`` win silently."""
    from types import ModuleType

    from fedsim.experiment.errors import UsageError
    from fedsim.experiment.params import Param, parse_sets

    assert [Param(d).default_text() for d in ("", [], None, [1, 2], "a b", 0.5)] == ["''", "''", "none", "1,2",
                                                                                      "a b", "0.5"]
    mod = ModuleType("fedsim_scenario_x")
    mod.PARAMS = {"k": Param(1), "j": Param(0.5)}
    assert parse_sets(mod, ["k=2", "j=0.25"]) == {"k": 2, "j": 0.25}
    with pytest.raises(UsageError, match="--set k: given twice"):
        parse_sets(mod, ["k=2", "k=3"])


def test_human_tables_read_units_off_column_names():
    """Mutants of ``_unit_of``: a ratio of bytes (``comm_bytes_ratio``, ``flops_per_byte``)
    shown as bytes; the seconds columns other than ``*_s`` (``*_seconds``, ``wall``,
    ``duration``, ``seconds``) shown as plain numbers."""
    from fedsim.experiment.report import format_table

    row = {"bytes": 2000, "comm_bytes_ratio": 3.5, "flops_per_byte": 0.25, "wait_seconds": 0.5, "wall": 65.2,
           "duration": 0.0123, "seconds": 4.567, "round_s": 2e-5, "rounds": 3}
    cols = list(row)
    text = format_table([row], cols, human=True, markdown=True).splitlines()[2]
    assert text == "| 2 kB | 3.5000 | 0.2500 | 500 ms | 1 min 05 s | 12.3 ms | 4.57 s | 20 µs | 3 |"


def test_plain_tables_align_on_the_wider_of_header_and_cells_and_keep_booleans():
    """Mutants of ``format_table``: column widths from the cells alone (a header wider than its
    cells stuck out of its column); a bool in a bytes column shown as ``1 B`` (True is an int)."""
    from fedsim.experiment.report import format_table

    rows = [{"n": 1, "payload_bytes_equal": True, "x": 12345}, {"n": 22, "payload_bytes_equal": False, "x": 7}]
    text = format_table(rows, ["n", "payload_bytes_equal", "x"], human=True)
    assert text.splitlines() == [
        " n  payload_bytes_equal      x",
        " 1                 True  12345",
        "22                False      7",
    ]


def test_csv_cells_read_back_to_the_same_float():
    """Mutant: ``csv_cell`` writing ``round(v, 12)``: 0.1 + 0.2 became 0.3 and 1e-20 became 0.0
    in every table CSV. The cell must read back (``float``) to the very number."""
    from fedsim.experiment.report import csv_cell

    import numpy as np

    for v in (0.1 + 0.2, 1 / 3, 1e-20, 123456789.123456789, -2.5e300, np.float32(0.1), np.float64(2 / 3)):
        assert float(csv_cell(v)) == float(v)
    assert csv_cell(float("nan")) == "" and csv_cell(float("nan"), nan="nan") == "nan"
    assert csv_cell(np.int64(7)) == "7" and csv_cell(np.bool_(True)) == "True"
    # None (deadline_s with --set deadline=none) was the text "None": a missing value is an empty cell
    assert csv_cell(None) == "" and csv_cell(None, nan="nan") == ""


def test_compare_same_bits_and_round_times_by_hand():
    """Mutants: ``same_bits`` without the dtype test (int32 zeros and float32 zeros have the same
    bytes); ``_round_times`` keeping a set-up round (-1) among the rounds compared."""
    import numpy as np

    from fedsim.experiment.compare import _round_times, same_bits

    assert not same_bits(np.zeros(3, np.int32), np.zeros(3, np.float32))
    assert same_bits(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]))
    assert not same_bits(np.zeros((2, 3)), np.zeros((3, 2)))
    roles = {"s": "server", "a": "client"}
    net = _hand_ledger([(-1, "a", "s", "keys", 10, 0, "delivered", 0.0, 0.5),
                        (0, "s", "a", "model", 10, 1, "delivered", 1.0, 1.5),
                        (0, "a", "s", "update", 10, 1, "delivered", 2.0, 4.0),
                        (1, "s", "a", "model", 10, 1, "delivered", 5.0, 5.5),
                        (1, "a", "s", "update", 10, 1, "lost", 6.0, NAN)], roles, unit=1)
    assert _round_times(net.ledger) == {0: 3.0, 1: 0.5}


# ---------------------------------------------------------------------------------------------
# the studies' tables read off the ledger: a hand-made ledger


def _hand_ledger(messages, roles, unit, framing=0):
    """A kernel Ledger holding ``messages`` (round, src, dst, kind, wire bytes, floats, status,
    send time, arrival time) and the nodes' ``roles``, as a network with it."""
    from types import SimpleNamespace

    from fedsim.kernel.ledger import ARRIVAL, STATUS, Ledger

    led = Ledger(unit=unit, framing_bytes=framing)
    for node, role in roles.items():
        led.set_role(node, role)
    for rnd, src, dst, kind, nbytes, floats, status, t, arrival in messages:
        row = led.new_row(rnd, src, dst, roles[src], roles[dst], kind, nbytes, 4 * floats, floats, t, False)
        row[STATUS] = status
        row[ARRIVAL] = arrival
    return SimpleNamespace(ledger=led)


NAN = float("nan")
#: FedRec++, d = 2, framing 10 bytes a message: server s, denoiser a, ordinary clients b and c.
#: Round -1 (set-up) has a noise message that is no iteration's; in round 0 c's upload and noise
#: are lost; round 1 has one upload. Models, assignments and stops are not counted.
_PP = [
    (-1, "b", "a", "noise", 30, 4, "delivered", 0.0, 0.0),
    (0, "s", "a", "model", 50, 8, "delivered", 0.0, 0.5), (0, "s", "b", "model", 50, 8, "delivered", 0.5, 1.0),
    (0, "s", "c", "model", 50, 8, "delivered", 1.0, 1.5),
    (0, "b", "s", "gradients", 26, 4, "delivered", 1.5, 2.0), (0, "c", "s", "gradients", 26, 4, "lost", 1.5, NAN),
    (0, "b", "a", "noise", 22, 2, "delivered", 2.0, 3.0), (0, "c", "a", "noise", 22, 2, "lost", 2.0, NAN),
    (0, "a", "s", "denoised", 18, 2, "delivered", 3.0, 5.0),
    (1, "s", "a", "model", 50, 8, "delivered", 10.0, 10.5), (1, "s", "b", "model", 50, 8, "delivered", 10.0, 10.5),
    (1, "s", "c", "model", 50, 8, "delivered", 10.0, 10.5), (1, "s", "b", "assign", 14, 0, "delivered", 10.0, 10.2),
    (1, "b", "s", "gradients", 26, 4, "delivered", 11.0, 13.0),
]
_PP_ROLES = {"s": "server", "a": "denoiser", "b": "ordinary", "c": "ordinary"}


def test_fedrecpp_table3_costs_from_a_hand_made_ledger():
    """Mutants: ``role_costs`` counting the set-up round's messages (without ``min_round=0``),
    counting a lost copy as received (without ``fate="delivered"``), or bytes without the
    network's framing (payload bytes); ``mean_round_duration`` from the last model sent (not the
    first). By hand, two iterations: a sent 2 floats (18 B) and received b's noise (2, 22 B);
    b sent 4 + 2 + 4 floats (26 + 22 + 26 B); c sent 4 + 2 (26 + 22 B), both lost."""
    from fedsim.protocols.fedrecpp import FedRecPPConfig
    from fedsim.studies.fedrecpp import (download_per_client, download_units_per_client, iterations_run,
                                         mean_round_duration, role_costs)

    net = _hand_ledger(_PP, _PP_ROLES, unit=2, framing=10)
    cfg = FedRecPPConfig(d=2, T=2)
    assert iterations_run(net) == 2
    rows = {r["role"]: r for r in role_costs(net, cfg)}
    assert rows["denoiser"] == {"role": "denoiser", "nodes": 1, "units_per_iteration": 4 / 2 / 2,
                                "bytes_per_iteration": 40 / 2}
    assert rows["ordinary"] == {"role": "ordinary", "nodes": 2, "units_per_iteration": (10 + 6) / 2 / 2 / 2,
                                "bytes_per_iteration": (74 + 48) / 2 / 2}
    assert rows["client"]["nodes"] == 3
    assert rows["client"]["units_per_iteration"] == pytest.approx(20 / 2 / 2 / 3)
    assert rows["client"]["bytes_per_iteration"] == pytest.approx(162 / 2 / 3)
    assert download_per_client(net, cfg) == 300 / 2 / 3  # six models of 50 B (wire), 2 iterations, 3 clients
    assert download_units_per_client(net, cfg) == 48 / 2 / 2 / 3
    # round 0: first model sent at 0, last counted arrival 5; round 1: 10 to 13
    assert mean_round_duration(net) == pytest.approx((5.0 + 3.0) / 2)


def test_fedrecpp_costs_of_a_run_of_no_iteration_are_nan_for_a_role_with_clients():
    """Mutant: ``_per_iteration`` giving 0.0 for no iteration (its docstring and role_costs': a
    run of no iteration is NaN, a role without clients 0)."""
    import math

    from fedsim.protocols.fedrecpp import FedRecPPConfig
    from fedsim.studies.fedrecpp import download_per_client, role_costs

    net = _hand_ledger([(-1, "b", "s", "noise", 30, 4, "delivered", 0.0, 0.0)], {"s": "server", "b": "ordinary"},
                       unit=2)
    rows = {r["role"]: r for r in role_costs(net, FedRecPPConfig(d=2, T=2))}
    assert rows["denoiser"]["nodes"] == 0 and rows["denoiser"]["units_per_iteration"] == 0.0
    assert math.isnan(rows["ordinary"]["units_per_iteration"]) and math.isnan(rows["client"]["bytes_per_iteration"])
    assert math.isnan(download_per_client(net, FedRecPPConfig(d=2, T=2)))


def test_fedrecpp_settings_helpers_by_hand():
    """Mutants: ``hf_setting`` taking ``tl = 0`` for "not given" (``tl <= 0``); ``denoisers``
    rounding n/K up, raising ``at_least_one`` on a plain number, refusing eta = n; ``as_fedrec``
    keeping rho with denoisers (FedRec++ with eta >= 1 is lossless: FedRec at rho = 0)."""
    from fedsim.protocols.fedrecpp import FedRecPPConfig
    from fedsim.studies.fedrecpp import as_fedrec, denoisers, hf_setting

    assert hf_setting(2.0) == (5, 15) and hf_setting(2.0, tp=0, tl=0) == (0, 0) and hf_setting(2.0, tl=3) == (5, 3)
    assert denoisers("n/4", 10) == 2  # floor(10 / 4)
    assert denoisers("n/4", 3) == 0 and denoisers("n/4", 3, at_least_one=True) == 1
    assert denoisers("0", 5, at_least_one=True) == 0
    assert denoisers("5", 5) == 5
    assert as_fedrec(FedRecPPConfig(eta=2, rho=1.5)).rho == 0.0
    assert as_fedrec(FedRecPPConfig(eta=0, rho=1.5)).rho == 1.5


def test_fpl_epoch_units_down_and_up_from_a_hand_made_ledger():
    """Mutants: the download read as the messages *to* the server (``dst_role``), the upload as
    every unit, the bytes without the network's framing (payload bytes). d = 2: the server sends two models of 8 floats, the clients 6 and 4 (one lost:
    it was sent, it counts)."""
    from fedsim.protocols import fpl
    from fedsim.studies.fpl.runs import training_traffic

    roles = {"s": "server", "a": "client", "b": "client"}
    net = _hand_ledger([(0, "s", "a", "model", 60, 8, "delivered", 0.0, 1.0),
                        (0, "s", "b", "model", 60, 8, "delivered", 0.0, 1.0),
                        (0, "a", "s", "update", 40, 6, "delivered", 1.0, 2.0),
                        (0, "b", "s", "update", 30, 4, "lost", 1.0, NAN),
                        (0, "s", "a", "evaluate", 5, 0, "delivered", 2.0, 3.0)], roles, unit=2, framing=5)
    # bytes: on the wire (the framing included)
    assert training_traffic(net, fpl.SPEC) == {"cce_ledger": 13.0, "down_units": 8.0, "up_units": 5.0,
                                               "bytes": 190, "raw_bytes": 104, "messages": 4}


def test_fpl_mean_cce_and_tcc_by_hand():
    """Mutant: ``mean_cce`` over all but the last epoch. Epochs of 1, 2 and 6 vectors."""
    from types import SimpleNamespace

    from fedsim.studies.fpl.runs import ledger_tcc, mean_cce

    rec = SimpleNamespace(curve=[{"cce_ledger": 1.0}, {"cce_ledger": 2.0}, {"cce_ledger": 6.0}])
    assert mean_cce(rec) == 3.0 and mean_cce(rec, 2) == 1.5 and mean_cce(rec, 3) == 3.0
    assert ledger_tcc(rec, 2) == 3.0 and ledger_tcc(rec, 3) == 9.0


def test_fpl_epoch_seeds_are_63_bit_integers():
    """Mutant: ``(w[0] << 32) ^ w[1]`` for ``<< 31``: half the epoch seeds were 64-bit
    integers (the docstring's, and a NumPy int64's, range is 63 bits)."""
    from fedsim.studies.fpl.runs import epoch_seed

    seeds = [epoch_seed(s, e) for s in range(16) for e in range(8)]
    assert all(0 <= x < 2 ** 63 for x in seeds) and len(set(seeds)) == len(seeds)
    assert max(seeds) >= 2 ** 62  # (the top bit of the 63 is used)


def test_personalfr_communication_figures_from_a_hand_made_ledger():
    """Mutants of ``comm_from_ledger``: the total with the evaluation messages; the download
    without FedAvg's ``model``; per round over rounds + 1; upload bytes without framing; upload
    floats not per message; no set-up bytes. Two rounds, two clients, 5 bytes of framing. PersonalFR:
    set-up ``indices`` 2 x 20 B; downloads 100, 100, 100, 100 (decoders) B; uploads 40, 30, 40, 30 B
    of 6, 4, 6, 4 floats; evaluation 7 + 9 B. FedAvg-AE: downloads 160 B (models), uploads as
    PersonalFR's, evaluation 7 + 9 B, no set-up. The kinds are read from each protocol's spec
    (the hand lists counted either protocol's kinds in both: a PersonalFR ledger's ``model`` row,
    which it never sends, as a download)."""
    from fedsim.protocols import fedavg_ae, personalfr
    from fedsim.studies.personalfr.runs import comm_from_ledger

    roles = {"s": "server", "a": "client", "b": "client"}
    ups = [(r, c, "s", "update", nb, fl) for r in (1, 2) for c, nb, fl in (("a", 40, 6), ("b", 30, 4))]
    ev = [(2, "s", "a", "evaluate", 7, 0), (2, "a", "s", "eval", 9, 0)]
    pfr = [(0, "a", "s", "indices", 20, 0), (0, "b", "s", "indices", 20, 0),
           *[(r, "s", c, "decoder", 100, 20) for r in (1, 2) for c in "ab"], *ups, *ev]
    net = _hand_ledger([(*m, "delivered", 0.0, 1.0) for m in pfr], roles, unit=None, framing=5)
    assert comm_from_ledger(net, 2, personalfr.SPEC) == {
        "total_bytes": 40 + 400 + 140, "setup_bytes": 40, "bytes_per_round": (400 + 140) / 2,
        "down_bytes_per_client": 400 / 4, "up_bytes_per_client": 140 / 4, "up_floats_per_client": 20 / 4,
        "client_rounds": 4, "eval_bytes": 16, "messages": 10}
    avg = [*[(r, "s", c, "model", 160, 30) for r in (1, 2) for c in "ab"], *ups, *ev]
    net = _hand_ledger([(*m, "delivered", 0.0, 1.0) for m in avg], roles, unit=None, framing=5)
    assert comm_from_ledger(net, 2, fedavg_ae.SPEC) == {
        "total_bytes": 640 + 140, "setup_bytes": 0, "bytes_per_round": (640 + 140) / 2,
        "down_bytes_per_client": 640 / 4, "up_bytes_per_client": 140 / 4, "up_floats_per_client": 20 / 4,
        "client_rounds": 4, "eval_bytes": 16, "messages": 8}
    # a kind the spec does not declare for training (a PersonalFR run has no model) is no download
    net = _hand_ledger([(*m, "delivered", 0.0, 1.0) for m in pfr + [(2, "s", "b", "model", 160, 30)]], roles,
                       unit=None, framing=5)
    assert comm_from_ledger(net, 2, personalfr.SPEC)["down_bytes_per_client"] == 400 / 4


def test_personalfr_tables_order_methods_and_charge_flops_per_round_run(tmp_path):
    """Mutants of ``result_tables``: FLOPs per round over the rounds asked for, not the rounds
    run (a run stopped early, ``rounds_run``, was charged too little per round); PersonalFR's
    rows before FedAvg's (the paper's order: joint, FedAvg, PersonalFR)."""
    from fedsim.experiment.context import RunContext
    from fedsim.studies.personalfr import result_tables

    def run(method, flops, rounds_run):
        return {"task": "explicit", "method": method, "M": 4, "n_users": 30, "n_items": 40, "seed": 1,
                "validation": False, "rounds": 4, "rounds_run": rounds_run, "best": 1.0, "final": 1.0,
                "best_round": 2, "wall_s": 0.1, "history": [{"round": 2, "rmse": 1.0}], "clients_per_round": 1,
                "client_flops": flops,
                "comm": {"bytes_per_round": 1.0, "down_bytes_per_client": 1.0, "up_bytes_per_client": 1.0,
                         "setup_bytes": 0}}

    ctx = RunContext("t", {}, "tiny", 1, None, tmp_path, quiet=True)
    result_tables(ctx, [run("personalfr", 6e9, 2), run("fedavg", 8e9, 4)], title="t")
    (acc,) = [t for t in ctx.tables if t.name == "results"]
    (comm,) = [t for t in ctx.tables if t.name == "results_comm"]
    assert [r["method"] for r in acc.rows] == ["fedavg", "personalfr"]
    assert [(r["method"], r["client_gflop_per_round"]) for r in comm.rows] == [("fedavg", 2.0), ("personalfr", 3.0)]


# ---------------------------------------------------------------------------------------------
# sweeps


def test_failure_line_marks_an_error_of_several_lines(tmp_path):
    """Mutant: without the `` ...`` that says the error had more lines than the one shown."""
    from fedsim.studies.sweep import failure_line

    out = tmp_path / "x=2,f=1+2"
    out.mkdir()
    (out / "error.txt").write_text("Traceback (most recent call last):\n  ...\nRuntimeError: boom\n")
    res = {"point": {"x": 2, "f": [1, 2]}, "out": str(out), "error": "RuntimeError: boom\n  at line 3\n"}
    assert failure_line(res) == f"failed x=2,f=1+2: RuntimeError: boom ... (traceback in {out}/error.txt)"
    res["error"] = "RuntimeError: boom"
    assert failure_line(res) == f"failed x=2,f=1+2: RuntimeError: boom (traceback in {out}/error.txt)"


def test_failure_line_claims_a_traceback_only_where_error_txt_holds_one(tmp_path):
    """Every failure line said "(traceback in OUT/error.txt)", also for a point whose error.txt
    held only how its process died (or a Ray task's, or one whose files could not be written)."""
    from fedsim.studies.sweep import failure_line

    out = tmp_path / "x=1"
    out.mkdir()
    (out / "error.txt").write_text("the point's process exited with status 3 before it finished\n")
    res = {"point": {"x": 1}, "out": str(out), "error": "the point's process exited with status 3 before it finished"}
    assert failure_line(res) == f"failed x=1: {res['error']} (recorded in {out}/error.txt)"
    (out / "error.txt").unlink()
    assert failure_line(res) == (f"failed x=1: {res['error']} ({out}/error.txt could not be read: "
                                 "No such file or directory)")


def test_a_stale_points_differences_name_keys_the_new_configuration_lacks():
    """Mutant: ``_differences`` comparing a nested table (``network``) over the new one's keys
    only: a key the finished point had and the new configuration has not (``loss``) was no
    difference, and the point passed for done."""
    from fedsim.studies.sweep import _differences

    old = {"config": {"rounds": 3}, "network": {"profile": "lan", "loss": 0.1}, "seed": 0}
    new = {"config": {"rounds": 3}, "network": {"profile": "lan"}, "seed": 0}
    assert _differences(old, new) == "loss=0.1, now None"
    assert _differences(new, old) == "loss=None, now 0.1"
    assert _differences(old, {**old, "seed": 2}) == "seed=0, now 2"


def test_a_ray_points_files_are_stored_with_results_json_last(tmp_path, monkeypatch):
    """Mutant: ``_store_point`` writing the files a Ray task returned in name order: results.json
    (the mark of a finished point) came before z.csv; it must be last, and the folder appear
    whole (a temporary folder renamed into place)."""
    from pathlib import Path
    from types import SimpleNamespace

    from fedsim.studies import sweep

    order = []
    real = Path.write_bytes

    def spy(self, data):
        order.append((self.parent.name.startswith(".x=1.partial-"), self.name))
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", spy)
    files = {"results.json": b"{}\n", "a.csv": b"a\n", "report.md": b"r\n", "z.csv": b"z\n"}
    res = sweep._store_point(SimpleNamespace(out=str(tmp_path / "x=1")), {"files": dict(files), "status": "done"})
    assert res == {"status": "done"}
    assert order == [(True, "a.csv"), (True, "report.md"), (True, "z.csv"), (True, "results.json")]
    assert {p.name: p.read_bytes() for p in (tmp_path / "x=1").iterdir()} == files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x=1"]


# ---------------------------------------------------------------------------------------------
# params


def test_a_parameters_type_follows_its_list_default():
    """Mutant: ``inner <= {int, float}`` for ``inner <= {int}`` in ``Param.type_name``: a list
    of floats was an ``ints`` parameter, and ``--set k=0.5,1.5`` was refused."""
    from fedsim.experiment.params import Param, parse_value

    assert [Param(d).type_name for d in ([1, 2], [0.5, 1.0], [1, 0.5], ["a"], (), 3, 0.5, True, "x")] == [
        "ints", "floats", "floats", "strs", "ints", "int", "float", "bool", "str"]
    assert parse_value("k", "0.5,1.5", Param([0.25])) == [0.5, 1.5]
    assert parse_value("k", "1,2", Param([3])) == [1, 2]


def test_set_values_may_hold_an_equals_sign_and_param_of_keeps_a_scenarios_default():
    """Mutants: ``s.split("=")[:2]`` for ``s.split("=", 1)`` (``--set name=a=b`` set ``a``);
    ``Param.of`` ignoring the scenario's ``default`` (fewer rounds than the paper's); a string
    given through the API for a text parameter read as ``--set`` text (``"none"`` became None)."""
    from types import ModuleType

    from fedsim.experiment.params import Param, check_value, parse_sets
    from fedsim.protocols.fedrec import FedRecConfig

    mod = ModuleType("fedsim_scenario_x")
    mod.PARAMS = {"name": Param("x"), "k": Param(1)}
    assert parse_sets(mod, ["name=a=b", "k = 4"]) == {"name": "a=b", "k": 4}
    assert Param.of(FedRecConfig, "T", 3).default == 3 and Param.of(FedRecConfig, "T").default == FedRecConfig().T
    assert check_value("name", "none", Param(None, kind="str")) == "none"
    assert check_value("name", None, Param(None, kind="str")) is None


def test_output_files_order_tables_report_results_ledger_plots_log(tmp_path):
    """Mutant: ``output_files`` without ledger.csv's own place (after results.json): it came
    among the tables."""
    from fedsim.experiment.runner import output_files

    for name in ("z.csv", "ledger.csv", "a.csv", "run.log", "results.json", "report.md", "p.png", "x.txt"):
        (tmp_path / name).write_text("")
    (tmp_path / "sub").mkdir()
    assert output_files(tmp_path) == ["a.csv", "z.csv", "report.md", "results.json", "ledger.csv", "p.png",
                                      "run.log", "x.txt"]


def test_none_for_a_parameter_whose_default_is_none_and_set_keys_stripped():
    """Mutants: a parameter whose default is None not admitting ``none`` (``--set k=none`` gave
    the text 'none'); ``set_keys`` not stripping (``--set ' rounds =2'`` with ``--rounds 3`` was
    not seen as the same parameter given twice)."""
    from fedsim.experiment.params import Param, parse_value, set_keys

    assert parse_value("k", "none", Param(None)) is None
    assert parse_value("k", "abc", Param(None)) == "abc"
    assert set_keys([" rounds =2", "lr=0.1=x", "flag"]) == {"rounds", "lr", "flag"}
    assert set_keys(None) == set()


def test_a_scenario_loaded_from_a_path_keeps_its_whole_stem():
    """Mutant: ``scenario_name`` cutting a path-loaded module's name at its last dot (exp.v2.py
    named v2: its folders, results.json and help pointed at another scenario)."""
    from types import ModuleType

    from fedsim.experiment.naming import scenario_name

    assert scenario_name(ModuleType("fedsim_scenario_exp.v2")) == "exp.v2"
    assert scenario_name(ModuleType("scenarios.fedrec_table2")) == "fedrec_table2"
    proto = ModuleType("fedsim_compare_fpl")
    proto.PROTOCOL = "compare-fpl"
    assert scenario_name(proto) == "compare-fpl"


def test_key_lines_skip_a_multi_line_string_that_ends_and_another_that_starts_on_one_line():
    """Mutant: a multi-line string taken to end on a line holding its delimiter an even number of
    times (``two\"\"\", \"\"\"three`` ends one and opens another): ``k = 4`` inside the second was
    read as the key k, and an error about the real k named line 3."""
    from fedsim.experiment.configfile import key_lines

    text = 'a = ["""one\ntwo""", """three\nk = 4\n"""]\nk = 5\n[params]\nrounds = 2\n'
    assert key_lines(text) == {("a",): 1, ("k",): 5, ("params",): 6, ("params", "rounds"): 7}


def test_an_empty_out_folder_is_used_and_a_killed_force_runs_latest_results_put_back(tmp_path):
    """Mutants: ``OutputFolder`` refusing an explicit ``--out`` that exists but is empty (it is
    filled, as a missing one is); ``recover_replaced`` putting back the *oldest* of several folders
    killed ``--force`` runs had moved aside (the docstring: the most recently moved one, the
    others are older results and are removed)."""
    import subprocess
    import sys
    import time

    from fedsim.experiment.runner import OutputFolder, recover_replaced

    empty = tmp_path / "empty"
    empty.mkdir()
    folder = OutputFolder(empty, explicit=True)
    assert folder.tmp.parent == tmp_path and folder.tmp.is_dir()
    folder.discard()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # a pid that has ended: the runs that moved these folders aside are dead
    final = tmp_path / "out"
    for i, label in enumerate(("older", "newer")):
        d = tmp_path / f".out.replaced-{proc.pid}-{i:06x}"
        (tmp_path / label).mkdir()
        (tmp_path / label / "results.json").write_text(label)
        time.sleep(0.05)
        os.rename(tmp_path / label, d)  # (the rename sets its ctime: moved aside now)
    restored, removed = recover_replaced(final)
    assert (final / "results.json").read_text() == "newer"
    assert restored.name == f".out.replaced-{proc.pid}-000001"
    assert [d.name for d in removed] == [f".out.replaced-{proc.pid}-000000"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "out"]


def test_seeds_are_checked_and_the_command_line_wins_over_the_file(tmp_path):
    """Mutants: ``run_scenario`` accepting seed -1 (``< -1``); ``resolve_run_options`` letting the
    file's seed win over ``--seed``, and accepting a file's seed of -1."""
    import argparse
    from types import ModuleType

    from fedsim.experiment import UsageError, run_scenario
    from fedsim.experiment.runner import add_run_arguments, resolve_run_options

    with pytest.raises(UsageError, match="--seed must be non-negative, got -1"):
        run_scenario("demo", seed=-1, out=tmp_path / "o", quiet=True)
    assert list(tmp_path.iterdir()) == []
    ap = argparse.ArgumentParser()
    add_run_arguments(ap)
    mod = ModuleType("fedsim_scenario_x")
    mod.PARAMS = {}
    doc = {"seed": 3, "_path": "run.toml", "_lines": {("seed",): 2}}
    assert resolve_run_options(mod, ap.parse_args(["--seed", "5"]), doc)["seed"] == 5
    assert resolve_run_options(mod, ap.parse_args([]), doc)["seed"] == 3
    with pytest.raises(UsageError, match=r"^run.toml: line 2: seed: expected a non-negative integer, got -1$"):
        resolve_run_options(mod, ap.parse_args([]), {**doc, "seed": -1})


def test_config_files_refuse_booleans_for_numbers_and_give_an_array_of_tables_its_first_line(tmp_path):
    """Mutants: ``load_config`` taking ``seed = true`` for an int and ``[network] loss = true``
    for a number (True is an int in Python); ``key_lines`` giving a repeated ``[[header]]`` its
    last line instead of its first."""
    from fedsim.experiment import UsageError
    from fedsim.experiment.configfile import key_lines, load_config

    f = tmp_path / "run.toml"
    f.write_text("data = \"tiny\"\nseed = true\n")
    with pytest.raises(UsageError, match=r"run.toml: line 2: seed: expected int, got True$"):
        load_config(f)
    f.write_text("[network]\nprofile = \"lan\"\nloss = true\n")
    with pytest.raises(UsageError, match=r"run.toml: line 3: \[network\] loss: expected a number, got True$"):
        load_config(f)
    assert key_lines("[[a]]\nx = 1\n[[a]]\nx = 2\n") == {("a",): 1, ("a", "x"): 2}


def test_run_options_from_a_file_and_the_command_line(tmp_path):
    """Mutants of ``resolve_run_options``/``net_from_args``: the file's ``[params]`` winning over
    ``--set``; the file's ``ledger = true`` ignored; a dropout window of three numbers accepted."""
    import argparse
    from types import ModuleType

    from fedsim.experiment import UsageError
    from fedsim.experiment.params import Param
    from fedsim.experiment.runner import add_run_arguments, net_from_args, resolve_run_options

    ap = argparse.ArgumentParser()
    add_run_arguments(ap)
    mod = ModuleType("fedsim_scenario_x")
    mod.PARAMS = {"k": Param(1), "j": Param(0.5)}
    doc = {"params": {"k": 2, "j": 0.25}, "ledger": True, "_path": "run.toml", "_lines": {}}
    opts = resolve_run_options(mod, ap.parse_args(["--set", "k=3"]), doc)
    assert opts["overrides"] == {"k": 3, "j": 0.25} and opts["ledger"] is True
    assert resolve_run_options(mod, ap.parse_args([]), {})["ledger"] is False
    with pytest.raises(UsageError, match=r"--dropout-window expects START,END in seconds, got '0,1,2'"):
        net_from_args(mod, ap.parse_args(["--dropout", "0.5", "--dropout-window", "0,1,2"]))
    assert net_from_args(mod, ap.parse_args(["--dropout", "0.5", "--dropout-window", "0,2"])).window == (0.0, 2.0)


def test_config_files_with_a_bom_hyphenated_keys_and_sweep_keys(tmp_path):
    """Mutants of ``load_config``/``at``: a file starting with a byte order mark refused; an
    error about ``[network] link-model`` (written with a hyphen) without its line; a sweep key
    in a run's file called unknown instead of 'for fedsim sweep'."""
    from fedsim.experiment import UsageError
    from fedsim.experiment.configfile import at, load_config

    f = tmp_path / "run.toml"
    f.write_text("\ufeffseed = 1\n", encoding="utf-8")
    assert load_config(f)["seed"] == 1
    f.write_text("seed = 1\n[network]\nprofile = \"lan\"\nlink-model = \"fair\"\n")
    doc = load_config(f)
    assert at(doc, "network", "link_model") == f"{f}: line 4"
    f.write_text("seed = 1\nworkers = 2\n")
    with pytest.raises(UsageError, match=r"run.toml: line 2: workers is for fedsim sweep, not fedsim run$"):
        load_config(f)
    assert load_config(f, sweep=True)["workers"] == 2


def test_a_point_folder_with_results_is_not_failed_for_an_old_error_file(tmp_path):
    """Mutant: ``_folder_state`` calling a folder failed whenever it holds error.txt, even beside
    a finished results.json (whose presence says the point completed)."""
    import json

    from fedsim.studies.sweep import _folder_state

    d = tmp_path / "x=1"
    d.mkdir()
    (d / "error.txt").write_text("RuntimeError: boom\n")
    assert _folder_state(d, {"config": {"x": 1}}) == ("failed", "failed before")
    (d / "results.json").write_text(json.dumps({"finished": "now", "tables": ["t"], "config": {"x": 1}}))
    (d / "t.csv").write_text("a\n1\n")
    (d / "report.md").write_text("# x\n")
    assert _folder_state(d, {"config": {"x": 1}}) == ("done", "")
    assert _folder_state(d, {"config": {"x": 2}}) == ("stale", "x=1, now 2")


# ---------------------------------------------------------------------------------------------
# the ledger's summaries


def test_ledger_groups_pay_framing_and_by_role_counts_every_node_that_held_a_role():
    """Mutants: ``LedgerView.group``'s payload bytes with the framing left in (wire bytes);
    ``by_role`` counting a role's nodes by their final roles (a client that became a denoiser
    was no client any more, and the clients' per-node figures were divided by too few)."""
    from fedsim.kernel.ledger import STATUS, Ledger

    led = Ledger(unit=2, framing_bytes=10)
    for node, role in (("s", "server"), ("a", "client"), ("b", "client")):
        led.set_role(node, role)
    led.new_row(0, "a", "s", "client", "server", "up", 110, 40, 10, 0.0, False)[STATUS] = "delivered"
    led.new_row(0, "b", "s", "client", "server", "up", 50, 8, 2, 0.0, False)[STATUS] = "delivered"
    led.set_role("b", "denoiser")
    led.new_row(1, "b", "s", "denoiser", "server", "sum", 30, 4, 1, 1.0, False)[STATUS] = "delivered"
    g = led.view().group("kind")
    assert (g["up"].wire_bytes, g["up"].payload_bytes, g["sum"].payload_bytes) == (160, 140, 20)
    rows = {(r["round"], r["role"], r["direction"]): r for r in led.by_role()}
    assert rows[(0, "client", "sent")]["nodes"] == 2  # a and b were clients
    assert rows[(0, "client", "sent")]["bytes_per_node"] == 80.0
    assert rows[(0, "client", "sent")]["units_per_node"] == 3.0  # 12 floats / 2 / 2 nodes
    assert rows[(1, "denoiser", "sent")]["nodes"] == 1


def test_a_point_folder_is_corrupt_without_each_file_a_finished_run_has(tmp_path):
    """Mutants of ``_folder_state``: a results.json without ``finished``, a missing table CSV, a
    missing report.md, a missing ledger.csv (when asked for) each passing for a finished point;
    and ``point_dir_name`` letting a '/' of a value into the folder name."""
    import json

    from fedsim.studies.sweep import _folder_state, point_dir_name

    d = tmp_path / "x=1"
    d.mkdir()
    key = {"config": {"x": 1}}
    (d / "results.json").write_text(json.dumps({"tables": ["t"], "config": {"x": 1}}))
    assert _folder_state(d, key) == ("corrupt", "results.json unreadable or incomplete (no 'finished' field)")
    (d / "results.json").write_text(json.dumps({"finished": "now", "tables": ["t", "u"], "config": {"x": 1}}))
    (d / "t.csv").write_text("a\n1\n")
    assert _folder_state(d, key) == ("corrupt", "results.json unreadable or incomplete (missing u.csv, report.md)")
    (d / "u.csv").write_text("a\n1\n")
    (d / "report.md").write_text("# x\n")
    assert _folder_state(d, key) == ("done", "")
    assert _folder_state(d, key, ledger=True) == ("corrupt",
                                                  "results.json unreadable or incomplete (missing ledger.csv)")
    assert _folder_state(tmp_path / "none", key) == ("missing", "")
    assert point_dir_name({"data": "a/b c", "f": [1, 2]}) == "data=a_b_c,f=1+2"


def test_by_node_lists_every_node_with_a_role_even_one_that_sent_nothing():
    """Mutant: ``by_node`` built from the traffic alone: a node that neither sent nor received
    (a client that dropped out at once) was missing, not listed with zeros."""
    from fedsim.kernel.ledger import STATUS, Ledger

    led = Ledger(unit=1)
    for node, role in (("s", "server"), ("a", "client"), ("b", "client")):
        led.set_role(node, role)
    led.new_row(0, "a", "s", "client", "server", "up", 30, 8, 2, 0.0, False)[STATUS] = "delivered"
    zero = dict.fromkeys(("sent_messages", "sent_bytes", "sent_floats", "received_messages", "received_bytes",
                          "received_floats"), 0)
    assert led.by_node() == {"s": {**zero, "received_messages": 1, "received_bytes": 30, "received_floats": 2},
                             "a": {**zero, "sent_messages": 1, "sent_bytes": 30, "sent_floats": 2}, "b": zero}


def test_combine_by_hand(tmp_path):
    """Mutants of ``combine``: a table column named like a grid axis kept as is (two ``x``
    columns in one CSV); the grid's columns after the table's; a ``combined_*.csv`` of a table no
    point has now left in place. Columns: the axes, then the union of the tables' columns in
    order of first appearance, a missing cell empty."""
    import csv
    import json

    from fedsim.studies.sweep import combine, sweep_key

    for x, text in ((1, "x,a\n9,1\n"), (2, "b,a\n5,6\n7,8\n")):
        d = tmp_path / f"x={x}"
        d.mkdir()
        (d / "results.json").write_text(json.dumps({"finished": "now", "tables": ["t"]}))
        (d / "t.csv").write_text(text)
    (tmp_path / "combined_old.csv").write_text("x\n1\n")
    paths = combine(tmp_path, [{"x": 1}, {"x": 2}])
    assert paths == [str(tmp_path / "combined_t.csv")]
    with open(tmp_path / "combined_t.csv", newline="") as fh:
        assert list(csv.reader(fh)) == [["x", "t.x", "a", "b"], ["1", "9", "1", ""], ["2", "", "6", "5"],
                                        ["2", "", "8", "7"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["combined_t.csv", "x=1", "x=2"]
    # the sweep's key does not depend on the order its axes are given in
    assert sweep_key("demo", {"a": [1], "b": [2]}, {}, None, 0, None) == \
        sweep_key("demo", {"b": [2], "a": [1]}, {}, None, 0, None)


# ---------------------------------------------------------------------------------------------
# live


def test_worker_figures_go_to_the_innermost_active_display():
    """Mutants: ``active()`` returning the first display activated (a sweep's, under which a
    point's run activated its own) instead of the last; ``snapshot_text`` dropping round 0
    (a falsy round)."""
    from fedsim.experiment.live import activate, active, deactivate, snapshot_text

    outer, inner = object(), object()
    before = active()
    activate(outer)
    activate(inner)
    try:
        assert active() is inner
        deactivate(inner)
        assert active() is outer
    finally:
        deactivate(inner)
        deactivate(outer)
    assert active() is before
    assert snapshot_text([{"round": 7}]) == "round 7" and snapshot_text([{"round": 0}]) == "round 0"
    assert snapshot_text([{"round": -1}]) == "setup"
    assert snapshot_text([{"round": 3}, {"round": -4}, {"round": None}]) == "rounds 3|setup for round 3"
