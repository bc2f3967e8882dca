"""merge_ledgers: the runs' ledger CSVs in one file with a ``run`` column, read back as written."""

from __future__ import annotations

import csv

import pytest

from fedsim.experiment.runner import merge_ledgers
from fedsim.kernel import network_record
from fedsim.kernel import ledger as L
from fedsim.kernel.ledger import COLUMNS, Ledger


class _Net:  # what network_record reads of a network that has run
    simulated = True

    def __init__(self, ledger):
        self.ledger = ledger

    def now(self):
        return 1.0


def _ledger(kinds):
    led = Ledger(unit=2)
    for i, k in enumerate(kinds):
        r = led.new_row(i, "s", "c1", "server", "client", k, 100 + i, 8, 2, 0.25 * i, False)
        r[L.STATUS], r[L.READ] = "delivered", True
    return led


def _read(path):
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


def test_merged_rows_read_back_with_their_run_and_every_field(tmp_path):
    # before: each physical line was prefixed with "<file stem>," unquoted: a label with a comma
    # (network_record keeps ","; "a,b" -> a,b.csv) split the run column in two (22 fields, run "a"),
    # a row whose kind held "\n" got "<run>," written inside its quoted kind, and a "\r" in a
    # field became "\n" (the parts were read with newline translation)
    parts = tmp_path / "parts"
    odd = ["model", "a,b", 'say "hi"', "x\ny", "r\rs", ""]
    leds = {"00001-a,b": _ledger(odd), "00002-plain": _ledger(["model", "grad"])}
    for label, led in leds.items():
        assert network_record(_Net(led), parts, label)["ledger"].endswith(f"{label}.csv")
    n = merge_ledgers(parts, tmp_path / "ledger.csv")
    assert n == 8 and not parts.exists()
    rows = _read(tmp_path / "ledger.csv")
    assert rows[0] == ["run", *COLUMNS]
    want = [[label, *(L._fmt(d[c]) for c in COLUMNS)] for label, led in leds.items() for d in led.records()]
    assert rows[1:] == want
    assert [r[1 + COLUMNS.index("kind")] for r in rows[1:7]] == odd
    # plain rows are the part's bytes behind "<run>,"
    text = (tmp_path / "ledger.csv").read_text(encoding="utf-8")
    plain = (leds["00002-plain"].to_csv()).splitlines(keepends=True)[1:]
    assert text.endswith("".join("00002-plain," + line for line in plain))


def test_an_empty_or_foreign_part_is_refused_naming_it(tmp_path):
    parts = tmp_path / "parts"
    network_record(_Net(_ledger(["m"])), parts, "one")
    (parts / "a-empty.csv").write_text("")  # claimed, never written: not a ledger (before: taken as the header)
    with pytest.raises(RuntimeError, match="a-empty.csv is empty"):
        merge_ledgers(parts, tmp_path / "ledger.csv")
    (parts / "a-empty.csv").unlink()
    (parts / "two.csv").write_text("a,b\n1,2\n")
    with pytest.raises(RuntimeError, match="two.csv.*header"):
        merge_ledgers(parts, tmp_path / "ledger.csv")


def test_no_parts_give_a_header_only_file(tmp_path):
    assert merge_ledgers(tmp_path / "none", tmp_path / "ledger.csv") == 0
    assert (tmp_path / "ledger.csv").read_text() == "run\n"


def test_network_record_names_the_file_after_the_whole_label_made_safe(tmp_path):
    # a sweep point's label (long, with '=' and ','): kept whole up to 150 characters; a run of
    # unsafe characters becomes one '_'; further records of the same label get '~2', '~3', ...
    label = "00012-" + ",".join(f"param{k}={k / 7:.6f}" for k in range(5))  # 85 characters
    assert len(label) == 85
    rec = network_record(_Net(_ledger(["m"])), tmp_path, label)
    assert rec["ledger"] == str(tmp_path / f"{label}.csv")
    assert (rec["sim_time"], rec["simulated"], rec["totals"]["messages"]) == (1.0, True, 1)
    deep = tmp_path / "not" / "yet"  # folders that do not exist yet are made
    assert network_record(_Net(_ledger(["m"])), deep, "r")["ledger"] == str(deep / "r.csv")
    rec = network_record(_Net(_ledger(["m"])), tmp_path, "a b/\\:c" + "x" * 200)
    assert rec["ledger"] == str(tmp_path / ("a_b_c" + "x" * 145 + ".csv"))
    for k in (2, 3, 4):
        assert network_record(_Net(_ledger(["m"])), tmp_path, label)["ledger"] == str(tmp_path / f"{label}~{k}.csv")


@pytest.mark.parametrize("transport", ["sim", "asyncio"])
def test_network_record_of_a_real_run_reports_its_clock_and_kind(transport):
    from fedsim.kernel import AsyncioNetwork, SimNetwork

    async def a(ctx):
        await ctx.sleep(2.5)
        await ctx.send("b", "m", {"x": 1})

    async def b(ctx):
        await ctx.receive("m")

    net = SimNetwork() if transport == "sim" else AsyncioNetwork(time_scale=0.05)
    net.add_node("a", a)
    net.add_node("b", b)
    net.run()
    rec = network_record(net)
    assert rec["simulated"] is (transport == "sim") and rec["ledger"] is None
    assert rec["totals"] == net.ledger.totals() and rec["totals"]["delivered_messages"] == 1
    if transport == "sim":
        assert rec["sim_time"] == 2.5  # the sleep, then an instant delivery
    else:  # real seconds over the time scale, frozen at the end of the run: at least the 2.5 slept
        assert rec["sim_time"] == net.now() and rec["sim_time"] >= 2.5
