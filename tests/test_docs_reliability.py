"""docs/reliability.md's fault table is what its command measures today: `fedsim run fault_study` is
run as written (with --ledger), every figure of the printed rows is compared with the study's
csv files, and the ledger-derived columns (lost messages, clients gone, rounds, round time) and
the stated totals are recomputed from ledger.csv, independently of fedsim.studies.faults. The
table had not been re-measured since the protocols' missing-record shapes changed (a figure
that moves now fails here instead of going stale silently). One to two minutes on 2 cores (97 s
on a shared machine), some 170 MB of ledger.csv in a temporary folder."""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "reliability.md"
COMMAND = "fedsim run fault_study --out /tmp/fault_full"
PROTOCOLS = ("fedrec", "fpl", "personalfr")


def half_up(x: float, places: int) -> str:
    """``x`` to ``places`` decimals as a reader rounds (70.85 -> 70.9; Python's format gives 70.8)."""
    return str(Decimal(repr(x)).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP))


def seconds(x: float) -> str:
    return f"{x:.3g} s"


def doc_table() -> list[dict[str, str]]:
    lines = [ln for ln in DOC.read_text().splitlines() if ln.startswith("| ")]
    start = next(i for i, ln in enumerate(lines) if ln.startswith("| loss | dropout | FedRec RMSE"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for ln in lines[start + 1:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        if len(cells) != len(header):
            break
        rows.append(dict(zip(header, cells)))
    return rows


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    from fedsim.experiment import run_scenario

    text = DOC.read_text()
    assert f"    {COMMAND}     # ml100k-like, wan profile, deadline 5 s, 20 rounds" in text  # the command run here
    out = tmp_path_factory.mktemp("fault_study") / "fault_full"
    results = run_scenario("fault_study", out=out, ledger=True, quiet=True)  # the scenario's defaults, as the command
    tables = {}
    for proto in PROTOCOLS:
        with open(out / f"faults_{proto}.csv", newline="") as fh:
            tables[proto] = {(float(r["loss"]), float(r["dropout"])): r for r in csv.DictReader(fh)}
    # the ledger (some 900,000 rows) folded per run as it is read, not held
    runs: dict[str, RunFigures] = defaultdict(RunFigures)
    with open(out / "ledger.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            runs[r["run"]].add(r)
    return results, tables, runs


class RunFigures:
    """What the table's ledger columns need of one run's ledger rows, folded row by row."""

    def __init__(self) -> None:
        self.messages = self.lost = self.payload = 0
        self.gone: set[str] = set()
        self.first_send: dict[int, float] = {}  # round -> its first send
        self.last_arrival: dict[int, float] = {}  # round -> its last arrival

    def add(self, r: dict) -> None:
        self.messages += 1
        self.payload += int(r["raw_bytes"])
        self.lost += r["status"] == "lost"
        if r["note"] == "receiver offline":
            self.gone.add(r["dst"])
        elif r["note"] == "sender offline":
            self.gone.add(r["src"])
        k = int(r["round"])
        if k >= 0:
            t = float(r["send_time"])
            self.first_send[k] = min(t, self.first_send.get(k, t))
            if r["arrival_time"] not in ("", "nan"):
                a = float(r["arrival_time"])
                self.last_arrival[k] = max(a, self.last_arrival.get(k, a))


def test_the_documented_command_runs_the_documented_setting(study):
    results, tables, _ = study
    params = results["config"]
    assert (results["data"], results["profile"], results["network"]["link_model"]) == ("ml100k-like", "wan", "fifo")
    assert (params["deadline"], params["rounds"], params["window"]) == (5.0, 20, 30.0)
    # "the full 12-point grids per protocol are in ... faults_*.csv"; PersonalFR's rounds count its setup round
    assert {p: len(t) for p, t in tables.items()} == {p: 12 for p in PROTOCOLS}
    assert {int(r["rounds"]) for r in tables["personalfr"].values()} == {21}
    assert "Its `rounds` are 21" in " ".join(DOC.read_text().split())


def test_every_figure_of_the_fault_table_is_the_studys(study):
    _, tables, _ = study
    rows = doc_table()
    assert len(rows) == 8
    for row in rows:
        key = (float(row["loss"]), float(row["dropout"]))
        fr, fpl, pfr = (tables[p][key] for p in PROTOCOLS)
        want = {
            "FedRec RMSE": half_up(float(fr["test_rmse"]), 4),
            "FedRec round": seconds(float(fr["round_s"])),
            "FPL P@10": half_up(float(fpl["p_at_10"]), 4),
            "FPL round": seconds(float(fpl["round_s"])),
            "lost messages (FedRec)": f"{int(fr['lost_messages']):,}",
            "missing uploads / round (FedRec)": half_up(float(fr["missing_uploads_per_round"]), 1).removesuffix(".0"),
            "clients gone": fr["lost_clients"],
            "PersonalFR RMSE (clients evaluated)": f"{half_up(float(pfr['test_rmse']), 4)} ({pfr['eval_clients']})",
            "PersonalFR round": seconds(float(pfr["round_s"])),
            "lost messages (PersonalFR)": f"{int(pfr['lost_messages']):,}",
            "missing uploads / round (PersonalFR)": half_up(float(pfr["missing_uploads_per_round"]), 2)
            .removesuffix(".00"),
            "clients gone (PersonalFR, of 100)": pfr["lost_clients"],
        }
        assert {k: row[k] for k in want} == want, key


def test_the_tables_ledger_columns_and_totals_recomputed_from_the_ledger_csv(study):
    _, tables, runs = study
    assert len(runs) == 36
    for proto in PROTOCOLS:
        for (loss, dropout), fig in tables[proto].items():
            run = runs[f"{proto}-loss{loss:g}-drop{dropout:g}"]
            assert run.lost == int(fig["lost_messages"])
            assert len(run.gone) == int(fig["lost_clients"])
            # a round lasts from its first send to the next round's first; the last, to its last arrival
            rounds = sorted(run.first_send)
            first = [run.first_send[k] for k in rounds]
            last = run.last_arrival[rounds[-1]]
            spans = [b - a for a, b in zip(first, first[1:])] + [last - first[-1]]
            assert len(rounds) == int(fig["rounds"])
            assert sum(spans) / len(spans) == pytest.approx(float(fig["round_s"]), rel=1e-12)
    # the header's totals: the 24 FedRec and FPL runs of 2026-11-23, and all 36 runs now
    older = [run for name, run in runs.items() if not name.startswith("personalfr")]
    text = " ".join(DOC.read_text().split())
    for n, chosen in ((24, older), (36, list(runs.values()))):
        messages = sum(run.messages for run in chosen)
        payload = sum(run.payload for run in chosen)
        assert f"{n} runs" in text
        assert f"{messages:,} messages, {payload / 1e9:.{0 if n == 24 else 1}f} GB of simulated payload" in text, n


def test_the_prose_figures_follow_from_the_table():
    rows = {(r["loss"], r["dropout"]): r for r in doc_table()}
    rmse = {k: float(r["FedRec RMSE"]) for k, r in rows.items()}
    text = " ".join(DOC.read_text().split())
    assert (f"Losing a fifth of all messages costs FedRec {rmse['0.2', '0'] - rmse['0', '0']:.4f} RMSE; losing 30 % "
            f"of the clients as well costs {rmse['0.2', '0.3'] - rmse['0', '0']:.4f}") in text
    assert f"({rows['0', '0']['FPL P@10']} → {rows['0', '0.3']['FPL P@10']} at 30 % dropout)" in text
    assert f"Without faults a FedRec round takes {rows['0', '0']['FedRec round']} on `wan`" in text
    pfr = {k: re.fullmatch(r"([0-9.]+) \((\d+)\)", r["PersonalFR RMSE (clients evaluated)"]).groups()
           for k, r in rows.items()}
    assert (f"it scores {pfr['0', '0'][0]} without faults, twice FedRec's {rows['0', '0']['FedRec RMSE']}") in text
    assert (f"5 % loss gives {pfr['0.05', '0'][0]} over {pfr['0.05', '0'][1]} clients, 30 % dropout "
            f"{pfr['0', '0.3'][0]} over {pfr['0', '0.3'][1]}") in text
    assert (f"({rows['0', '0']['PersonalFR round']}, {rows['0.05', '0']['PersonalFR round']} at 5 % loss, "
            f"{rows['0.2', '0.3']['PersonalFR round']} at 20 % loss and 30 % dropout)") in text
    assert f"({rows['0.05', '0']['missing uploads / round (PersonalFR)']} missing per round at 5 % loss)" in text
