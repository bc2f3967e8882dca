"""Run outputs that claim only what happened (issue 20) and that a person can read (issue 24):
folders committed by rename, results.json last and atomic, reused folders refused, interrupted
runs leave nothing, same-second runs apart; progress on terminals and in logs, within a run and
from workers; the closing line, human units, the paper-setting note."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedsim.experiment import Progress, UsageError, run_scenario
from fedsim.experiment import runner as runner_mod

REPO = Path(__file__).resolve().parents[1]


def fedsim_cmd(*args, cwd, timeout=180):
    return subprocess.run([sys.executable, "-m", "fedsim", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


SLOW = (
    "import time\n"
    "from fedsim.experiment import Param\n"
    "PARAMS = {'wait': Param(30.0, 'seconds')}\n"
    "def run(ctx):\n"
    "    net = ctx.network()\n"
    "    from fedsim.protocols import REGISTRY\n"
    "    spec = REGISTRY['demo']\n"
    "    data, cfg = spec.tiny(2, 1, 0)\n"
    "    spec.build(net, data, cfg).collect(net.run())\n"
    "    ctx.record_network(net)\n"
    "    ctx.table('t', [{'a': 1}])\n"
    "    open(ctx.out.parent / 'started', 'w').close()\n"
    "    time.sleep(ctx['wait'])\n"
)


def test_interrupted_run_into_a_reused_out_leaves_the_earlier_run_whole(tmp_path):
    out = tmp_path / "o"
    assert fedsim_cmd("run", "demo", "--set", "rounds=1", "--out", str(out), "--quiet", cwd=tmp_path).returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    script = tmp_path / "slow.py"
    script.write_text(SLOW)
    proc = subprocess.Popen([sys.executable, "-m", "fedsim", "run", str(script), "--out", str(out), "--force",
                             "--ledger", "--quiet"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not (tmp_path / "started").exists():
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "Traceback" not in err and "interrupted" in err
    # the earlier run is there as it was: no partial ledger.csv or tables of the new one beside it
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert not list(tmp_path.glob(".o.*"))


def test_the_folder_a_killed_run_left_is_removed_by_the_next_run_into_the_same_out(tmp_path):
    # a run killed outright (SIGKILL, the out-of-memory killer) cleans nothing: its hidden
    # .o.partial-PID-X stayed beside --out for ever, however often the command was run again
    out = tmp_path / "o"
    script = tmp_path / "slow.py"
    script.write_text(SLOW)
    proc = subprocess.Popen([sys.executable, "-m", "fedsim", "run", str(script), "--out", str(out), "--quiet"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not (tmp_path / "started").exists() and proc.poll() is None:
        time.sleep(0.01)
    proc.kill()
    proc.communicate(timeout=30)
    (dead,) = tmp_path.glob(".o.partial-*")
    assert dead.name.startswith(f".o.partial-{proc.pid}-") and (dead / "t.csv").is_file()
    live = tmp_path / f".o.partial-{os.getpid()}-abcdef"  # a run still under way (this process)
    live.mkdir()
    other = tmp_path / f".o2.partial-{proc.pid}-abcdef"  # another --out's: not this run's business
    other.mkdir()
    res = run_scenario(str(script), out=out, overrides={"wait": 0.0}, quiet=True)
    assert sorted(p.name for p in tmp_path.glob(".*")) == sorted([live.name, other.name])
    assert f"removed {dead}: the temporary folder of a run into {out} that was killed" in (out / "run.log").read_text()
    assert res["files"] == ["t.csv", "report.md", "results.json", "run.log"]



def test_a_run_refused_for_a_used_out_leaves_no_partial_folder_beside_it(tmp_path, capsys):
    # a run refused because --out held a run (no --force) left the .o.partial-PID-X folder a killed
    # --force run into it had left, until a run into --out was let through; now the refused run
    # removes it, says so, and the parent folder holds --out and nothing else of fedsim's
    from fedsim.cli import main

    out = tmp_path / "o"
    assert main(["run", "demo", "--set", "rounds=1", "--out", str(out), "--quiet"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    script = tmp_path / "slow.py"
    script.write_text(SLOW)
    proc = subprocess.Popen([sys.executable, "-m", "fedsim", "run", str(script), "--out", str(out), "--force",
                             "--quiet"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not (tmp_path / "started").exists() and proc.poll() is None:
        time.sleep(0.01)
    proc.kill()
    proc.communicate(timeout=30)
    (dead,) = tmp_path.glob(".o.partial-*")
    assert dead.name.startswith(f".o.partial-{proc.pid}-")
    capsys.readouterr()
    assert main(["run", "demo", "--set", "rounds=1", "--out", str(out), "--quiet"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o", "slow.py", "started"]
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: --out {out} already holds a finished run; use --force to replace it, or choose another --out "
        f"(removed {dead.name}: left beside it by killed runs)"]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # refused again: nothing left to remove, nothing said of it
    assert main(["run", "demo", "--set", "rounds=1", "--out", str(out), "--quiet"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: --out {out} already holds a finished run; use --force to replace it, or choose another --out"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o", "slow.py", "started"]

def test_a_live_run_whose_pid_this_host_does_not_know_keeps_its_folder(tmp_path):
    # remove_dead_partials took a folder's PID, as this host sees PIDs, for its run's: a run on
    # another host sharing the file system (NFS), or in another PID namespace (a container), was
    # taken for dead and its folder removed under it; and a dead run's folder whose PID another
    # process now has was kept for ever. The run's lock on its folder decides now.
    out = tmp_path / "o"
    script = tmp_path / "slow.py"
    script.write_text(SLOW)
    proc = subprocess.Popen([sys.executable, "-m", "fedsim", "run", str(script), "--out", str(out), "--quiet"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not (tmp_path / "started").exists() and proc.poll() is None:
            time.sleep(0.01)
        (live,) = tmp_path.glob(".o.partial-*")
        # the folder as it looks from another host: the PID of a process this host has not (above
        # Linux's largest pid_max)
        foreign = live.with_name(re.sub(r"partial-\d+-", f"partial-{(1 << 22) + 1}-", live.name))
        live.rename(foreign)
        assert runner_mod.remove_dead_partials(out) == []
        assert (foreign / "t.csv").is_file()
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    # killed: its lock went with it, so its folder goes, whatever process has its PID now (this one)
    reused = foreign.with_name(re.sub(r"partial-\d+-", f"partial-{os.getpid()}-", foreign.name))
    foreign.rename(reused)
    assert runner_mod.remove_dead_partials(out) == [reused]
    assert list(tmp_path.glob(".o.*")) == []


@pytest.mark.parametrize("filename", [None, "report.md"])
def test_a_full_disk_is_one_error_line_and_leaves_no_folder(tmp_path, monkeypatch, capsys, filename):
    # no space left while the run wrote its files (its log's last line failing too): the command
    # line ended in Python's tracebacks, chained, and a failing log line skipped the removal of
    # the temporary folder
    import errno

    from fedsim import cli
    from fedsim.experiment import Progress as P

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", *([str(tmp_path / filename)] if filename else []))

    real_finish = P.finish

    def finish(self, text=None):
        if text and text.startswith("stopped"):
            real_finish(self)  # (the log closed, as finish does when its last line fails)
            raise OSError(errno.ENOSPC, "No space left on device")
        real_finish(self, text)

    monkeypatch.setattr(runner_mod, "write_report", full)
    monkeypatch.setattr(P, "finish", finish)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "demo", "--set", "rounds=1", "--quiet", "--out", "o"]) == 2
    where = f" writing {tmp_path / filename}" if filename else ""
    assert capsys.readouterr() == ("", f"error: the run stopped: No space left on device{where}; its output folder o "
                                       "was not written (free some space, or choose another --out)\n")
    assert list(tmp_path.iterdir()) == []


def test_the_run_log_is_closed_when_its_last_line_fails():
    """A full disk failing the run log's last line (a write the file system refuses, ENOSPC, as
    /dev/full does) left run.log open: finish wrote that line before closing, and raised past the
    close (a ResourceWarning for an unclosed run.log on a long-lived process, e.g. a test run)."""
    import errno
    import os

    def open_dev_full() -> int:
        fds = os.listdir("/proc/self/fd")
        return sum(1 for fd in fds if os.path.realpath(f"/proc/self/fd/{fd}") == "/dev/full")

    before = open_dev_full()
    p = Progress(False, log="/dev/full")
    assert open_dev_full() == before + 1
    with pytest.raises(OSError) as err:
        p.finish("stopped: a run that failed")
    assert err.value.errno == errno.ENOSPC
    assert open_dev_full() == before
    p.finish("again")  # nothing left to write to or close


def test_a_failure_after_the_tables_leaves_no_folder(tmp_path, monkeypatch):
    def broken(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(runner_mod, "write_report", broken)
    with pytest.raises(OSError, match="disk full"):
        run_scenario("demo", out=tmp_path / "o", overrides={"rounds": 1}, quiet=True)
    assert list(tmp_path.iterdir()) == []


def test_results_json_is_written_last_and_atomically(tmp_path, monkeypatch):
    seen = {}
    real = runner_mod.write_results

    def spy(folder, results):
        seen["files"] = sorted(p.name for p in Path(folder).iterdir())
        seen["final_exists"] = (tmp_path / "o").exists()
        real(folder, results)

    monkeypatch.setattr(runner_mod, "write_results", spy)
    run_scenario("demo", out=tmp_path / "o", overrides={"rounds": 1}, quiet=True, ledger=True)
    assert "results.json" not in seen["files"] and {"report.md", "summary.csv", "ledger.csv", "run.log"} <= set(
        seen["files"])
    assert not seen["final_exists"]  # the folder appears only once complete
    assert json.loads((tmp_path / "o" / "results.json").read_text())["config"]["rounds"] == 1
    # atomic: a write that fails before the rename leaves the previous content, and no temporary file
    from fedsim.experiment.report import write_atomic

    target = tmp_path / "x.json"
    target.write_text("old")
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError("crash")))
    with pytest.raises(OSError):
        write_atomic(target, "new content")
    monkeypatch.undo()
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o", "x.json"]  # the .x.json.PID.tmp stayed


def test_two_runs_started_in_the_same_second_get_two_folders(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(runner_mod, "default_out_dir", lambda name: Path("runs") / f"20260101-000000-{name}")
    a = run_scenario("demo", overrides={"rounds": 1}, quiet=True)
    b = run_scenario("demo", overrides={"rounds": 2}, quiet=True)
    assert a["out"] == "runs/20260101-000000-demo" and b["out"] == "runs/20260101-000000-demo-2"
    assert json.loads(Path(a["out"], "results.json").read_text())["config"]["rounds"] == 1
    assert json.loads(Path(b["out"], "results.json").read_text())["config"]["rounds"] == 2


def test_a_script_with_dots_in_its_name_is_named_by_its_whole_stem(tmp_path, monkeypatch):
    from fedsim.experiment import load_scenario, scenario_name

    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.v2.py").write_text("from fedsim.experiment import Param\nPARAMS = {'x': Param(0, 'x')}\n"
                                        "def run(ctx):\n    ctx.table('t', [{'x': ctx['x']}])\n")
    assert scenario_name(load_scenario(str(tmp_path / "exp.v2.py"))) == "exp.v2"  # was 'v2'
    res = run_scenario(str(tmp_path / "exp.v2.py"), quiet=True)
    assert Path(res["out"]).name.endswith("-exp.v2")


def test_a_run_into_an_explicit_folder_another_run_filled_meanwhile_keeps_its_files(tmp_path, monkeypatch):
    from fedsim.experiment import UsageError

    out = tmp_path / "out"
    real = runner_mod.write_results

    def and_another_run_finishes(folder, results):  # the other run commits while this one writes
        real(folder, results)
        out.mkdir()
        (out / "results.json").write_text("{}")

    monkeypatch.setattr(runner_mod, "write_results", and_another_run_finishes)
    with pytest.raises(UsageError, match="filled by another run") as err:
        run_scenario("demo", out=out, overrides={"rounds": 1}, quiet=True)
    kept = tmp_path / "out-2"
    assert str(kept) in str(err.value)
    assert json.loads((kept / "results.json").read_text())["config"]["rounds"] == 1
    assert (out / "results.json").read_text() == "{}"  # the other run's folder untouched


def test_out_may_not_be_the_working_folder_or_a_parent(tmp_path, monkeypatch):
    (tmp_path / "w").mkdir()
    for out in (".", ".."):
        res = fedsim_cmd("run", "demo", "--set", "rounds=1", "--out", out, "--quiet", cwd=tmp_path / "w")
        assert res.returncode == 2 and "working folder" in res.stderr, res.stderr
    assert list((tmp_path / "w").iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["w"]


def test_two_runs_in_parallel_into_the_default_folder_both_survive(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-m", "fedsim", "run", "demo", "--set", f"rounds={r}", "--quiet"],
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (1, 2)]
    for p in procs:
        _, err = p.communicate(timeout=120)  # (reads and closes its pipes)
        assert p.returncode == 0, err
    rounds = sorted(json.loads(f.read_text())["config"]["rounds"] for f in (tmp_path / "runs").glob("*/results.json"))
    assert rounds == [1, 2]


def test_piped_run_prints_a_plain_line_per_step_and_keeps_a_run_log(tmp_path):
    res = fedsim_cmd("run", "quickstart", "--data", "tiny", "--set", "iterations=2", "--out", "o", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "\r" not in res.stderr and "\x1b" not in res.stderr
    steps = [ln for ln in res.stderr.splitlines() if re.match(r"^\[\s*\d+:\d\d\] quickstart \d/4, elapsed ", ln)]
    assert [re.search(r" (\d)/4", ln).group(1) for ln in steps] == ["0", "1", "2", "3", "4"]
    assert any("ETA" in ln for ln in steps[1:4]) and "msgs" in steps[-1]
    log = (tmp_path / "o" / "run.log").read_text()
    assert log.splitlines()[0].split("] ", 1)[1].startswith("fedsim run quickstart: data tiny, seed 0, network wan")
    for ln in steps:
        assert ln.split("] ", 1)[1].split(", elapsed")[0] in log
    # in the units of every other line (it was {:.1f} s: "finished in 0.0 s" of a 40 ms run)
    from fedsim.experiment import human_seconds

    wall = human_seconds(json.loads((tmp_path / "o" / "results.json").read_text())["wall_time_s"])
    assert log.splitlines()[-1].endswith(f"] finished in {wall}")
    # the closing line names the real folder and every file
    close = res.stdout.strip().splitlines()[-1]
    assert close.endswith(f"; wall {wall}")
    assert close.startswith("results in o/: accuracy.csv, communication.csv, report.md, results.json")
    assert "run.log" in close and "; wall " in close


def test_quiet_prints_only_the_closing_line(tmp_path):
    res = fedsim_cmd("run", "demo", "--set", "rounds=1", "--out", "o", "--quiet", "--ledger", cwd=tmp_path)
    assert res.returncode == 0 and res.stderr == ""
    assert res.stdout.splitlines() == [
        f"results in o/: {', '.join(runner_mod.output_files(tmp_path / 'o'))}; wall " + res.stdout.split("; wall ")[1]
        .strip()]
    assert "ledger.csv" in res.stdout


def test_tables_print_human_units_and_files_keep_raw_numbers(tmp_path):
    res = fedsim_cmd("run", "fedrec", "--set", "T=2", "--out", "o", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    import csv

    with open(tmp_path / "o" / "kinds.csv", newline="") as fh:
        kinds = list(csv.DictReader(fh))
    model = next(r for r in kinds if r["kind"] == "model")
    raw = int(model["bytes"])
    assert raw > 10_000 and model["bytes"].isdigit()
    from fedsim.experiment import human_bytes

    shown = human_bytes(raw)
    assert re.search(r"\d (kB|MB)$", shown)
    line = next(ln for ln in res.stdout.splitlines() if ln.split()[:1] == ["model"])
    assert shown in line and str(raw) not in line
    assert shown in (tmp_path / "o" / "report.md").read_text()
    saved = json.loads((tmp_path / "o" / "results.json").read_text())
    assert isinstance(saved["ledger_totals"]["bytes"], (int, float))


def test_human_units():
    from fedsim.experiment import human_bytes, human_seconds

    assert [human_bytes(n) for n in (0, 999, 1000, 123_456, 1_903_907_570.0, 6.3e9)] == [
        "0 B", "999 B", "1 kB", "123 kB", "1.9 GB", "6.3 GB"]
    # a mean of 999.6 bytes was written "1000 B"
    assert [human_bytes(n) for n in (999.4, 999.6, 999_600)] == ["999 B", "1 kB", "1 MB"]
    assert [human_seconds(s) for s in (0, 5e-5, 0.0123, 4.567, 65.2, 3725)] == [
        "0 s", "50 µs", "12.3 ms", "4.57 s", "1 min 05 s", "1 h 02 min"]
    # no carry lost at the rounding edges (119.9 s was written "1 min 00 s")
    assert [human_seconds(s) for s in (59.94, 59.96, 119.4, 119.9, 3599.4, 3599.6, 7199.9)] == [
        "59.9 s", "1 min 00 s", "1 min 59 s", "2 min 00 s", "59 min 59 s", "1 h 00 min", "2 h 00 min"]
    # what rounds to 1000 of a unit is written in the next one: the progress line of a run showed
    # "elapsed 1e+03 ms" (0.9996 s in %.3g)
    assert [human_seconds(s) for s in (999.4e-6, 999.6e-6, 0.9994, 0.9996, -0.9996)] == [
        "999 µs", "1 ms", "999 ms", "1 s", "-1 s"]


def test_human_units_at_the_extremes():
    # a float-noise difference of 1.39e-17 s was written "1.39e-11 µs", a negative 185 s "-4 min 55 s"
    # (divmod of a negative number), an infinite duration raised OverflowError, -0.4 bytes read
    # "-0 B" and a zettabyte "1e+03 PB"
    from fedsim.experiment import human_bytes, human_seconds

    assert [human_seconds(s) for s in (1.39e-17, -1e-13, 1e-11, 5e-10, 3e-7, 999.6e-9)] == [
        "< 1 ps", "> -1 ps", "0.01 ns", "0.5 ns", "300 ns", "1 µs"]
    assert [human_seconds(s) for s in (-185, -3725, -0.0, float("inf"), float("-inf"))] == [
        "-3 min 05 s", "-1 h 02 min", "0 s", "inf s", "-inf s"]
    # a deadline of 1e9 s read "277777 h 46 min", one of 1e300 s (which deadlines take) 296 digits of hours
    assert [human_seconds(s) for s in (1e9, 1e300, -1e300)] == ["277,777 h 46 min", "2.78e+296 h", "-2.78e+296 h"]
    assert [human_bytes(n) for n in (-0.0, -0.4, 0.4, -0.6, 1e18, 1.2e21, float("inf"))] == [
        "0 B", "0 B", "0 B", "-1 B", "1 EB", "1.2 ZB", "inf B"]
    for text in [human_seconds(10.0 ** k) for k in range(-20, 18)] + [human_bytes(10.0 ** k) for k in range(0, 25)]:
        assert "e+" not in text and "e-" not in text, text


def test_tables_write_no_negative_zero():
    # a difference of -1e-9 in a .4f column read "-0.0000" (and -0.0 and -0.5 "-0" at .0f)
    from fedsim.experiment import format_table

    rows = [{"gap": -1e-9, "n": -0.0, "d": -0.5}, {"gap": 0.25, "n": -0.6, "d": float("-inf")}]
    assert format_table(rows, ["gap"]).split() == ["gap", "0.0000", "0.2500"]
    assert format_table(rows, ["n", "d"], ".0f", markdown=True).splitlines()[2:] == ["| 0 | 0 |", "| -1 | -inf |"]


def test_tables_write_large_figures_out_whole():
    # fpl_tcc's tables (.5g, .6g) and the privacy audit's (.4g) wrote a TCC of 123,456 vectors
    # "1.2346e+05" and of 4.1e9 "4.109e+09", where an int cell writes every digit
    from fedsim.experiment import format_table

    rows = [{"tcc": 123456.0, "big": 4.1094e9, "huge": 1.5e300, "neg": -2.5e7}]
    assert format_table(rows, ["tcc", "big", "huge", "neg"], ".5g").splitlines()[1].split() == [
        "123456", "4109400000", "1.5e+300", "-25000000"]
    assert format_table(rows, ["tcc"], ".3g", markdown=True).splitlines()[2] == "| 123456 |"


def test_tables_write_small_figures_without_an_exponent():
    # the privacy audit's leakage table (.4g) wrote a random guess's exact recovery "8.052e-05",
    # fpl_tcc's (.6g) a difference from the closed form of 1.2345678e-05 % "1.23457e-05"
    from fedsim.experiment import format_table

    rows = [{"exact_rand": 8.052e-05, "diff_pct": -1.2345678e-05, "noise": 1e-17, "p": 0.5}]
    assert format_table(rows, ["exact_rand", "noise", "p"], ".4g").splitlines()[1].split() == [
        "0.00008052", "1e-17", "0.5"]
    assert format_table(rows, ["diff_pct"], ".6g", markdown=True).splitlines()[2] == "| -0.0000123457 |"
    # an exponent asked for stays
    assert format_table([{"x": 123456.0, "y": 8.052e-05}], ["x", "y"], ".2e").splitlines()[1].split() == [
        "1.23e+05", "8.05e-05"]


PAPER = (
    "from fedsim.experiment import Param\n"
    "PARAMS = {'iterations': Param(100, 'iterations')}\n"
    "def run(ctx):\n"
    "    r = ctx.load_data()\n"
    "    ctx.table('t', [{'mae': 2.53, 'paper_mae': 0.7418, 'n': len(r)}])\n"
)


def test_a_shortened_run_says_its_figures_are_not_the_papers(tmp_path):
    script = tmp_path / "paperish.py"
    script.write_text(PAPER)
    data = tmp_path / "u.data"
    data.write_text("".join(f"{u}\t{i}\t{1 + (u * i) % 5}\t{u * 100 + i}\n" for u in range(1, 6) for i in range(1, 5)))
    short = fedsim_cmd("run", str(script), "--data", str(data), "--set", "iterations=4", "--out", "a", cwd=tmp_path)
    assert short.returncode == 0, short.stderr
    assert "note: the paper_* columns are the published figures" in short.stdout
    assert "iterations=4 (default 100)" in short.stdout
    assert "**Not the paper's setting.**" in (tmp_path / "a" / "report.md").read_text()
    synthetic = fedsim_cmd("run", str(script), "--data", "tiny", "--out", "b", cwd=tmp_path)
    assert "synthetic data `tiny`" in synthetic.stdout
    as_paper = fedsim_cmd("run", str(script), "--data", str(data), "--out", "c", cwd=tmp_path)
    assert as_paper.returncode == 0 and "note:" not in as_paper.stdout
    assert "Not the paper" not in (tmp_path / "c" / "report.md").read_text()
    # a scenario whose paper setting is not its default declares it (PAPER_VALUES): the default is
    # then the departure, and the paper's value is not
    script2 = tmp_path / "paperish2.py"
    script2.write_text(PAPER.replace("PARAMS = {", "PAPER_VALUES = {'settings': 'paper'}\nPARAMS = {'settings': "
                                     "Param('quick', 'which settings'), "))
    quick = fedsim_cmd("run", str(script2), "--data", str(data), "--out", "d", cwd=tmp_path)
    assert quick.returncode == 0, quick.stderr
    assert "settings=quick (paper: paper)" in quick.stdout
    paper = fedsim_cmd("run", str(script2), "--data", str(data), "--set", "settings=paper", "--out", "e", cwd=tmp_path)
    assert paper.returncode == 0 and "note:" not in paper.stdout, paper.stdout
    assert "Not the paper" not in (tmp_path / "e" / "report.md").read_text()


# -- progress within a run and from workers ------------------------------------------------------

@pytest.mark.parametrize("streaming", [False, True])
def test_the_watch_reads_a_running_network_round_by_round(streaming):
    # with a StreamingLedger (no row list) the watch read nothing: the display showed no round or
    # message count for the whole run
    from fedsim.experiment.live import NetworkWatch
    from fedsim.kernel import SimNetwork, StreamingLedger

    watch = NetworkWatch().start()
    seen = []
    try:
        net = SimNetwork(seed=0, profile="lan", ledger=StreamingLedger(chunk_rows=1) if streaming else None)

        async def server(ctx):
            for r in range(4):
                ctx.begin_round(r)
                await ctx.send("client", "tick", {"r": r})
                await ctx.receive("tock")
                seen.append(watch.snapshot())  # what a display thread reads mid-run

        async def client(ctx):
            for _ in range(4):
                await ctx.receive("tick")
                await ctx.send("server", "tock", {})

        net.add_node("server", server, role="server")
        net.add_node("client", client)
        net.run()
        assert watch.snapshot() is None  # finished: nothing live
    finally:
        watch.stop()
    assert [s["messages"] for s in seen] == [2, 4, 6, 8]
    assert [s["round"] for s in seen] == [0, 1, 2, 3]
    assert all(b["sim_time"] > a["sim_time"] for a, b in zip(seen, seen[1:]))


def _wait_drawn(stream, text: str, within: float = 30.0) -> None:
    """Wait until the bar's thread has drawn ``text`` (a figure only its ticks draw), at most
    ``within`` seconds: a fixed sleep of 6 ticks was not always enough on a loaded machine."""
    end = time.monotonic() + within
    while text not in stream.getvalue() and time.monotonic() < end:
        time.sleep(0.01)


def test_terminal_bar_has_elapsed_eta_and_the_running_round():
    stream = io.StringIO()
    p = Progress(True, stream=stream, tty=True)
    p.TICK = 0.05
    p.update(0, 4, stage="folds")
    p.update(1, 4)
    p.beat(("worker", 1), {"round": 7, "messages": 50, "sim_time": 1.5})
    _wait_drawn(stream, "round 7")
    p.close()
    text = stream.getvalue()
    assert "folds" in text and "1/4" in text
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d\]", text), text  # elapsed<remaining
    assert "round 7" in text


def _slow_network_task(pauses: tuple[float, float, float, float]) -> int:
    """A 3-round network that stops in real time (seconds): just after its first message (at
    simulated time 0), inside the client's step in the last round, and after its last message
    before the network ends; then the task sleeps ``after`` (a worker reports the end of its
    network at its next beat)."""
    from fedsim.kernel import SimNetwork

    first, step, last, after = pauses
    net = SimNetwork(seed=0, profile="lan")

    async def server(ctx):
        for r in range(3):
            ctx.begin_round(r)
            await ctx.send("client", "tick", {"r": r})
            if r == 0:
                time.sleep(first)
            await ctx.receive("tock")

    async def client(ctx):
        for r in range(3):
            await ctx.receive("tick")
            if r == 2:
                time.sleep(step)  # a long step inside the last round (real time)
            await ctx.send("server", "tock", {})
        time.sleep(last)

    net.add_node("server", server, role="server")
    net.add_node("client", client)
    net.run()
    time.sleep(after)
    return len(net.ledger)


def test_workers_report_their_running_network_to_the_active_display(monkeypatch):
    # The test read a worker's beat once a second and wanted the last one from the client's long
    # step (5 messages, round 2) and every clock positive: a beat read as the run began (1 message
    # at simulated time 0) or as it ended (6 messages) failed it, now and then. The network here
    # stops at those instants, long enough for several beats (every 0.1 s), so the test sees them
    # each time. And: a worker sent its figures only when they changed, and the display drops a
    # worker it has not heard from for 5 s (a worker in a step over 5 s went from the display);
    # it did not say when its network ended, nor did the pool when it ended (the last figures
    # stayed on the display for 5 s).
    from fedsim.experiment import live
    from fedsim.experiment.live import activate, deactivate
    from fedsim.studies.parallel import pmap

    class Display:
        def __init__(self):
            self.beats = []

        def beat(self, source, snap):
            self.beats.append((source, snap))

    monkeypatch.setattr(live, "BEAT_EVERY", 0.1)  # (the workers are forked: they inherit it)
    d = Display()
    activate(d)
    try:
        assert pmap(_slow_network_task, [(0.3, 0.6, 0.3, 0.3), (0.3, 1.8, 0.3, 0.0)], workers=2) == [6, 6]
    finally:
        deactivate(d)
    seqs: dict = {}
    for src, s in d.beats:
        seqs.setdefault(src, []).append(None if s is None else (s["messages"], s["round"], s["sim_time"]))
    assert len(seqs) == 2 and all(any(seq) for seq in seqs.values())  # both workers reported
    states = [(1, 0), (2, 0), (3, 1), (4, 1), (5, 2), (6, 2)]  # (messages, round) as the network runs
    for seq in seqs.values():
        figs = [f for f in seq if f is not None]
        at = [states.index(f[:2]) for f in figs]
        assert at == sorted(at), figs  # read in the order the network went through them
        # read at each stop: at the first message, in the long step (again and again: at least
        # 3 of its 6 or 18 beats), after the last message
        assert [f[:2] for f in figs].count((1, 0)) >= 1 and [f[:2] for f in figs].count((5, 2)) >= 3, figs
        assert [f[:2] for f in figs].count((6, 2)) >= 1, figs
        clocks = [f[2] for f in figs]
        assert clocks == sorted(clocks) and all(c > 0 for (m, _, c) in figs if m >= 2), figs
        # gone from the display when the pool ended: the second task returns as its network
        # ends, before its worker's next beat
        assert seq[-1] is None, seq
    # the worker of the first task said its network had ended while the other still ran
    first_end = next(i for i, (_, s) in enumerate(d.beats) if s is None)
    assert any(s is not None for _, s in d.beats[first_end + 1:]), d.beats


def test_a_single_run_with_known_rounds_moves_the_bar_by_round():
    stream = io.StringIO()
    p = Progress(True, stream=stream, tty=True)
    p.TICK = 0.05
    p.update(0, 1, stage="fedrec on lan", rounds=10)
    p.beat(("worker", 1), {"round": 5, "messages": 50, "sim_time": 1.5})
    _wait_drawn(stream, "round 5/10")
    p.close()
    text = stream.getvalue()
    assert "round 5/10" in text and " 50%" in text
    last = [f for f in text.split("\r") if "round 5/10" in f][-1]
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d\]", last), last  # an ETA from the rounds, not '?'


def test_a_table_written_twice_is_refused(tmp_path):
    # the second NAME.csv replaced the first while report.md and results.json listed both
    from fedsim.experiment.context import RunContext

    ctx = RunContext(name="t", config={}, data="tiny", seed=0, net=None, out=tmp_path, quiet=True)
    ctx.table("a", [{"x": 1}])
    with pytest.raises(ValueError, match="table 'a' was already written"):
        ctx.table("a", [{"x": 2}])
    assert (tmp_path / "a.csv").read_text().splitlines() == ["x", "1"]


def test_a_scenario_script_refuses_a_parameter_given_as_option_and_as_set(tmp_path):
    # `python scenarios/quickstart.py --iterations 3 --set iterations=2` silently ran 3
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    res = subprocess.run([sys.executable, str(repo / "scenarios" / "quickstart.py"), "--iterations", "3",
                          "--set", "iterations=2", "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env={**__import__("os").environ, "PYTHONPATH": str(repo)})
    assert res.returncode == 2, res.stdout + res.stderr
    assert "--iterations and --set iterations: the same parameter given twice" in res.stderr
    assert not (tmp_path / "o").exists()


def test_report_tables_keep_one_cell_per_value_whatever_the_text(tmp_path):
    # a '|' in a cell (a plugin's message kind 'ask|reply') split it in two and shifted the row
    # under the wrong headers; a line break ended the row. Cells are escaped Markdown now.
    from fedsim.experiment.report import Table, write_report

    rows = [{"kind": "ask|reply", "messages": 3, "bytes": 1500}, {"kind": "two\nlines", "messages": 1, "bytes": 20}]
    results = {"scenario": "s", "data": "tiny", "seed": 0, "profile": "ideal", "wall_time_s": 1.0,
               "simulated_time_s": 0.5, "config": {}, "plots": [], "ledger_totals": {}}
    write_report(tmp_path, results, [Table("kinds", rows, ["kind", "messages", "bytes"], "Kinds")], [])
    lines = (tmp_path / "report.md").read_text().splitlines()
    start = lines.index("| kind | messages | bytes |")
    table = lines[start:start + 4]
    cells = [[c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in table]
    assert cells == [["kind", "messages", "bytes"], ["---", "---", "---"], ["ask|reply", "3", "1.5 kB"],
                     ["two lines", "1", "20 B"]]
    assert lines[start + 4] == ""


def test_a_diverged_protocol_run_says_so_and_a_converging_one_is_unchanged(tmp_path):
    # FedRec stops at the iteration whose parameters are not finite; the summary said rounds=5
    # with nothing about it (the test error alone hinted at it)
    import csv

    res = run_scenario("fedrec", out=tmp_path / "bad", overrides={"T": 5, "lr": 1e6}, quiet=True)
    with open(Path(res["out"]) / "summary.csv", newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    assert row["rounds"] == "5" and row["diverged_at"] == "3"
    assert list(row)[:4] == ["protocol", "rounds", "diverged_at", "simulated_s"]
    report = (tmp_path / "bad" / "report.md").read_text()
    assert ("**Diverged.** The model diverged: its parameters, or the scores they give, were found not finite at "
            "round 3 of 5, where the run stopped; its figures are not those of a trained model.") in report
    assert "note: the model diverged" in (tmp_path / "bad" / "run.log").read_text()
    res = run_scenario("fedrec", out=tmp_path / "good", overrides={"T": 5}, quiet=True)
    with open(Path(res["out"]) / "summary.csv", newline="") as fh:
        header = next(csv.reader(fh))
    assert "diverged_at" not in header and header[:3] == ["protocol", "rounds", "simulated_s"]
    assert "Diverged" not in (tmp_path / "good" / "report.md").read_text()


def test_a_final_model_whose_predictions_are_not_finite_is_a_diverged_run(tmp_path):
    # decay = 1e23: the parameters stay finite (the server never stops), the final model's
    # predictions overflow; test_error said DivergenceError but no note or caveat did (a sweep saw
    # a clean run)
    import csv

    res = run_scenario("fedrec", out=tmp_path / "bad", overrides={"T": 2, "decay": 1e23}, quiet=True)
    with open(Path(res["out"]) / "summary.csv", newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    assert "diverged_at" not in row
    # the model after iteration T = 2 (it said iteration 0, an initial model's number)
    assert row["test_error"] == "DivergenceError: PMF(B): diverged at iteration 2: non-finite predictions"
    report = (tmp_path / "bad" / "report.md").read_text()
    assert ("**Diverged.** The final model's parameters stayed finite, but the scores they give are not "
            "(`test_error`: PMF(B): diverged at iteration 2: non-finite predictions); its figures are not those of a "
            "trained model.") in report
    assert json.loads((tmp_path / "bad" / "results.json").read_text())["caveats"] == ["diverged"]


def test_a_disk_full_at_the_first_log_line_is_the_same_one_error_line_and_no_folder(tmp_path, monkeypatch, capsys):
    # run.log's first line was written before the guard that turns a full disk into one line: a
    # disk full when the run started was a traceback, and the partial folder stayed beside --out
    import errno

    from fedsim import cli
    from fedsim.experiment import Progress as P

    calls = []

    def log(self, text):
        calls.append(text)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(P, "log", log)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "demo", "--set", "rounds=1", "--quiet", "--out", "o"]) == 2
    assert calls[0].startswith("fedsim run demo: data ")  # the first line failed
    assert capsys.readouterr() == ("", "error: the run stopped: No space left on device; its output folder o "
                                       "was not written (free some space, or choose another --out)\n")
    assert list(tmp_path.iterdir()) == []


def test_the_git_revision_is_read_without_writing_into_the_checkout(tmp_path):
    # git status refreshed the checkout's index (taking .git/index.lock): under a file size limit
    # below the index's size (ulimit -f) SIGXFSZ killed it with its lock left, and every git
    # command in the checkout failed after ("Unable to create '.../index.lock': File exists")
    from fedsim.experiment.report import checkout_revision

    repo = tmp_path / "r"
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "f").write_text("a\n")
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    os.utime(repo / "f", (1_600_000_000, 1_600_000_000))  # (same content: its stat data in the index is stale)
    index = repo / ".git" / "index"
    before = (index.read_bytes(), index.stat().st_mtime_ns)
    assert checkout_revision(repo) == head  # (not dirty: the content is the same)
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before
    (repo / "f").write_text("b\n")
    assert checkout_revision(repo) == head + "-dirty"
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before and not (repo / ".git" / "index.lock").exists()


@pytest.mark.parametrize("ledger, file", [(True, ".ledgers/00001-network.csv"), (False, "cost_per_role.png")])
def test_a_real_file_size_limit_stops_the_run_naming_the_file_it_was_writing(tmp_path, ledger, file):
    # a disk that really fills up, or a file size limit, fails in write(), flush() or close(), whose
    # OSError names no file: the error line said "No space left on device; its output folder o was
    # not written" (or "File too large") and never which file (tests/test_disk_full_real.py fills a
    # real tmpfs; this is the same failure from RLIMIT_FSIZE, a limit of 20000 bytes: less than the
    # plot's 32 kB and the first network's ledger, more than what the run writes before them)
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))  # (Python ignores SIGXFSZ: EFBIG)

    r = subprocess.run([sys.executable, "-m", "fedsim", "run", "--data", "tiny", "--set", "iterations=2", "--set", "d=4",
                        "--quiet", "--out", "o", *(["--ledger"] if ledger else [])],
                       capture_output=True, text=True, cwd=tmp_path, timeout=180, preexec_fn=limit)
    (partial,) = re.findall(r"writing (\.o\.partial-\d+-[0-9a-f]+)/", r.stderr)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", (
        f"error: the run stopped: File too large writing {partial}/{file}; its output folder o was not written (a file "
        "grew larger than the file system or the file size limit (ulimit -f) allows; raise the limit, or choose an --out "
        "on another file system)\n"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("err, advice", [
    ("ENOSPC", "free some space, or choose another --out"),
    ("EDQUOT", "free some space, or choose another --out"),
    ("EFBIG", "a file grew larger than the file system or the file size limit (ulimit -f) allows; raise the "
              "limit, or choose an --out on another file system"),
])
def test_the_advice_of_a_stopped_run_follows_its_errno(tmp_path, monkeypatch, err, advice):
    # EFBIG (a file beyond the file system's or RLIMIT_FSIZE's size) was told to free some space,
    # which changes nothing
    import errno

    code = getattr(errno, err)

    def full(*args, **kwargs):
        raise OSError(code, os.strerror(code), str(tmp_path / "o.partial" / "report.md"))

    monkeypatch.setattr(runner_mod, "write_report", full)
    with pytest.raises(UsageError) as exc:
        run_scenario("demo", out=tmp_path / "o", overrides={"rounds": 1}, quiet=True)
    assert str(exc.value) == (f"the run stopped: {os.strerror(code)} writing {tmp_path / 'o.partial' / 'report.md'}; "
                              f"its output folder {tmp_path / 'o'} was not written ({advice})")
    assert list(tmp_path.iterdir()) == []


def test_a_forced_commit_whose_rename_fails_puts_the_earlier_run_back(tmp_path, monkeypatch):
    # the earlier run was removed before the new one was renamed in: a failed rename lost both
    out = tmp_path / "o"
    run_scenario("demo", out=out, overrides={"rounds": 1}, quiet=True)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real = os.rename

    def failing(src, dst):
        if ".partial-" in str(src):
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(runner_mod.os, "rename", failing)
    with pytest.raises(UsageError) as err:  # (a full disk: one line on the command line)
        run_scenario("demo", out=out, overrides={"rounds": 2}, quiet=True, force=True)
    assert str(err.value) == (f"the run stopped: No space left on device; its output folder {out} was not written "
                              "(free some space, or choose another --out)")
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]  # no .o.replaced-*, no .o.partial-*


def test_ctrl_c_while_the_replaced_run_is_removed_keeps_the_finished_one(tmp_path, monkeypatch):
    # the earlier run was removed (rmtree, long for a big ledger.csv) before the new one was
    # renamed in: Ctrl-C there discarded the new run and left the old one half removed
    out = tmp_path / "o"
    run_scenario("demo", out=out, overrides={"rounds": 1}, quiet=True)
    real = runner_mod.shutil.rmtree

    def interrupted(path, *a, **k):
        if ".replaced-" in str(path):
            raise KeyboardInterrupt
        return real(path, *a, **k)

    monkeypatch.setattr(runner_mod.shutil, "rmtree", interrupted)
    try:
        res = run_scenario("demo", out=out, overrides={"rounds": 2}, quiet=True, force=True)
    except KeyboardInterrupt:
        pytest.fail(f"the finished run was discarded as interrupted; left: {sorted(os.listdir(tmp_path))}")
    monkeypatch.undo()
    assert res["out"] == str(out)
    assert json.loads((out / "results.json").read_text())["config"]["rounds"] == 2
    assert [p.name.startswith(".o.replaced-") for p in tmp_path.iterdir() if p.name != "o"] == [True]


KILL_IN_SWAP = (
    "import os, signal, sys\n"
    "from fedsim.experiment import run_scenario, runner\n"
    "real_rename, real_rmtree = os.rename, runner.shutil.rmtree\n"
    "def rename(src, dst):\n"
    "    real_rename(src, dst)\n"
    "    if sys.argv[1] == 'aside' and '.replaced-' in str(dst):\n"
    "        os.kill(os.getpid(), signal.SIGKILL)  # the old folder aside, the new one not in\n"
    "def rmtree(path, *a, **k):\n"
    "    if sys.argv[1] == 'removing' and '.replaced-' in str(path):\n"
    "        os.kill(os.getpid(), signal.SIGKILL)  # the new folder in, the old one not removed\n"
    "    return real_rmtree(path, *a, **k)\n"
    "runner.os.rename, runner.shutil.rmtree = rename, rmtree\n"
    "run_scenario('demo', out=sys.argv[2], overrides={'rounds': 2}, quiet=True, force=True)\n"
)


def _killed_in_swap(tmp_path, when):
    out = tmp_path / "o"
    run_scenario("demo", out=out, overrides={"rounds": 1}, quiet=True)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    proc = subprocess.Popen([sys.executable, "-c", KILL_IN_SWAP, when, str(out)], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)})
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == -signal.SIGKILL, err
    (replaced,) = tmp_path.glob(".o.replaced-*")
    assert replaced.name.startswith(f".o.replaced-{proc.pid}-")
    return out, before, replaced


@pytest.mark.parametrize("force", [False, True])
def test_the_results_a_run_killed_mid_swap_moved_aside_are_put_back(tmp_path, force):
    # a --force run killed after it moved --out aside and before it renamed its own folder in left
    # no --out at all (the earlier results hidden in .o.replaced-PID-X) until a run went there, and
    # that run treated --out as new: the user's results stayed hidden for ever
    out, before, replaced = _killed_in_swap(tmp_path, "aside")
    assert not out.exists()
    if not force:  # refused as for the folder the user had, the folder back in place
        with pytest.raises(UsageError) as exc:
            run_scenario("demo", out=out, overrides={"rounds": 3}, quiet=True)
        # (and the killed run's own temporary folder removed, and named: the refused run leaves nothing)
        partial = replaced.name.replace(".replaced-", ".partial-")
        assert str(exc.value) == (f"--out {out} already holds a finished run (put back from {replaced.name}, where a "
                                  "run with --force into it that was killed had moved it); use --force to replace "
                                  f"it, or choose another --out (removed {partial}: left beside it by killed runs)")
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
        assert not list(tmp_path.glob(".o.*"))
        return
    run_scenario("demo", out=out, overrides={"rounds": 3}, quiet=True, force=True)
    assert json.loads((out / "results.json").read_text())["config"]["rounds"] == 3
    log = (out / "run.log").read_text()
    assert (f"put back {out} from {replaced}: a run with --force into it was killed after it moved the results "
            "there aside and before it put its own in") in log
    (partial,) = [line for line in log.splitlines() if "the temporary folder of a run into" in line]
    assert f"removed {replaced.with_name(replaced.name.replace('.replaced-', '.partial-'))}:" in partial
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]


def test_the_results_a_run_killed_while_removing_them_left_are_removed_by_the_next_run(tmp_path):
    out, before, replaced = _killed_in_swap(tmp_path, "removing")
    assert json.loads((out / "results.json").read_text())["config"]["rounds"] == 2  # the new run is in place
    assert {p.name: p.read_bytes() for p in replaced.iterdir()} == before
    run_scenario("demo", out=out, overrides={"rounds": 3}, quiet=True, force=True)
    assert (f"removed {replaced}: the results a run with --force into {out} replaced, left when that run was "
            "killed") in (out / "run.log").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]


def test_a_swap_under_way_is_left_alone_until_its_lock_is_free(tmp_path):
    # a run on another host (its PID unknown here) between its two renames: its lock decides
    import fcntl

    out = tmp_path / "o"
    token = f"{(1 << 22) + 1}-abcdef"
    partial, replaced = tmp_path / f".o.partial-{token}", tmp_path / f".o.replaced-{token}"
    partial.mkdir()
    replaced.mkdir()
    (replaced / "results.json").write_text("{}")
    fd = os.open(partial / ".run.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert runner_mod.recover_replaced(out) == (None, [])
        assert not out.exists() and (replaced / "results.json").is_file()
    finally:
        os.close(fd)
    assert runner_mod.recover_replaced(out) == (replaced, [])
    assert (out / "results.json").read_text() == "{}" and not replaced.exists()


def test_lost_clients_come_from_the_run_when_a_protocol_does_not_count_them(tmp_path):
    # the summary read info["lost_clients"] and said 0 for a (plug-in) protocol that leaves it out
    import csv
    import dataclasses

    from fedsim.experiment.protocol_run import protocol_scenario
    from fedsim.kernel import NetSpec
    from fedsim.protocols import REGISTRY

    demo = REGISTRY["demo"]

    def build(net, data=None, cfg=None, **kw):
        job = demo.build(net, data, cfg, **kw)

        class Job:
            def collect(self, run):
                res = job.collect(run)
                res.info.pop("lost_clients")
                return res
        return Job()

    REGISTRY.add(dataclasses.replace(demo, name="demo-uncounted", build=build))
    try:
        net = NetSpec(profile="wan", dropout=0.5, window=(0.0, 0.5))
        counts = []
        for name in ("demo", "demo-uncounted"):
            res = run_scenario(protocol_scenario(name), out=tmp_path / name, net=net,
                               overrides={"rounds": 3, "clients": 8, "deadline": 2.0}, quiet=True)
            with open(Path(res["out"]) / "summary.csv", newline="") as fh:
                (row,) = list(csv.DictReader(fh))
            counts.append(int(row["lost_clients"]))
    finally:
        REGISTRY.remove("demo-uncounted")
    assert counts[0] == counts[1] > 0


@pytest.mark.parametrize("loss", [0.0, 0.2])
def test_fedrecpp_run_with_faults_says_it_is_incomplete(tmp_path, loss):
    # the missing table was there, titled as missing uploads alone, and nothing in the notes said
    # that the test figures were those of an incomplete run
    import csv

    from fedsim.experiment.protocol_run import protocol_scenario
    from fedsim.kernel import NetSpec

    res = run_scenario(protocol_scenario("fedrecpp"), out=tmp_path / "o", net=NetSpec(profile="lan", loss=loss),
                       overrides={"T": 2, "d": 4, "deadline": 1.0}, quiet=True)
    out = Path(res["out"])
    report = (out / "report.md").read_text()
    if loss == 0:
        assert not (out / "missing.csv").exists() and "**Incomplete.**" not in report
        return
    with open(out / "missing.csv", newline="") as fh:
        missing = list(csv.DictReader(fh))
    # one row per round and kind missing (a kind, and how many of it, as every protocol's rows);
    # each round left a group out
    assert sorted({r["round"] for r in missing}) == ["0", "1"]
    assert all(r["kind"] in ("gradients", "denoised") and int(r["clients"]) > 0 for r in missing)
    assert all(sum(int(r["groups"]) for r in missing if r["round"] == t) >= 1 for t in ("0", "1"))
    assert (f"**Incomplete.** The run left {len(missing)} round record(s) of missing uploads or groups "
            "(table `missing`) and lost 0 client(s)") in report
    assert "FedRec++: also the groups and clients, left_out, left out of the update" in report
    # a record of round -1 is a secure-aggregation key only when its kind is keys: a plug-in's
    # setup exchange at round -1 (a statistics upload) was titled "clients whose key never arrived"
    assert "kind keys, round -1: clients whose secure-aggregation key never arrived)" in report
    assert "; round -1: clients whose key never arrived" not in report


def test_fedrec_run_scores_the_test_ratings_of_the_clients_present(tmp_path):
    # a client that dropped out left a zero user factor in the collected model (it predicts the
    # lowest rating): `fedsim run fedrec` (and `fedsim compare`) scored its test ratings all the
    # same, as if it had trained. They are now left out and counted.
    import csv

    import numpy as np

    from fedsim.data import per_user_random
    from fedsim.experiment.protocol_run import protocol_scenario, test_scores
    from fedsim.kernel import NetSpec
    from fedsim.protocols import REGISTRY

    spec = REGISTRY["fedrec"]
    data, cfg = spec.tiny(12, 3, 0)
    train, test = per_user_random(data, 0.3, seed=0)
    net = NetSpec(profile="wan", dropout=0.4, window=(0.0, 1.0)).build(0)
    job = spec.build(net, train, cfg.replace(deadline=5.0))
    res = job.collect(net.run())
    lost = [u for u, name in enumerate(job.clients) if name not in res.run.results]  # (by the run's own record)
    assert lost and res.info["lost_users"] == lost
    keep = ~np.isin(test.users, lost)
    assert not keep.all(), "a lost client must have test ratings for the test to mean anything"
    mae, rmse = res.model.evaluate(test.users[keep], test.items[keep], test.values[keep])
    everyone = res.model.evaluate(test.users, test.items, test.values)
    assert everyone[1] != rmse  # (the zero factors do count when scored)
    assert test_scores(res, test) == {"test_mae": mae, "test_rmse": rmse,
                                      "test_users_left_out": len(set(test.users[~keep].tolist()))}
    # and in a run's summary table
    out = run_scenario(protocol_scenario("fedrec"), out=tmp_path / "o",
                       net=NetSpec(profile="wan", dropout=0.4, window=(0.0, 1.0)),
                       overrides={"T": 3, "d": 4, "deadline": 5.0}, quiet=True)["out"]
    with open(Path(out) / "summary.csv", newline="") as fh:
        row = next(csv.DictReader(fh))
    assert int(row["lost_clients"]) > 0 and int(row["test_users_left_out"]) > 0


def test_the_progress_line_says_which_round_a_setup_prepares():
    # a negative round label is a setup round; below -1 that of a network resumed at round N (FPL's
    # key_setup_round): the progress line said "setup" for every one, as the trace views did
    from fedsim.experiment.live import snapshot_text
    from fedsim.protocols.fpl import key_setup_round

    assert snapshot_text([{"round": 7}]) == "round 7"
    assert snapshot_text([{"round": -1}]) == "setup"
    assert snapshot_text([{"round": key_setup_round(5)}]) == "setup for round 5"
    assert snapshot_text([{"round": 7}, {"round": -1}, {"round": -6}]) == "rounds 7|setup|setup for round 5"
    assert snapshot_text([{"round": None}]) == ""


def test_a_model_that_cannot_be_evaluated_keeps_the_count_of_users_left_out():
    # the except branch returned {"test_error": ...} alone: the run's summary lost how many users
    # had dropped out, which it gives for a model that can be evaluated
    import numpy as np

    from fedsim.experiment.protocol_run import test_scores

    class Model:
        def evaluate(self, users, items, values):
            raise ValueError("the model is not finite")

    class Result:
        model = Model()

        def present(self, users, items, values):
            keep = users != 0  # user 0 dropped out
            return users[keep], items[keep], values[keep], 1

    class Test:
        users, items, values = np.array([0, 1, 2]), np.array([3, 4, 5]), np.array([1.0, 2.0, 3.0])

    assert test_scores(Result(), Test()) == {"test_users_left_out": 1,
                                            "test_error": "ValueError: the model is not finite"}


def test_a_plot_matplotlib_cannot_lay_out_is_said_and_the_run_written(tmp_path):
    # a value near the float maximum in ctx.plot: matplotlib's ticks overflowed in savefig, a
    # traceback of the whole run with its tables computed and nothing written (the sweep's report
    # had the guard, a scenario's plots not)
    pytest.importorskip("matplotlib")
    script = tmp_path / "scn.py"
    script.write_text("from fedsim.experiment import Param\nPARAMS = {'x': Param(1e308, 'x')}\n"
                      "def run(ctx):\n"
                      "    ctx.table('t', [{'k': 'a', 'm': 1.0}])\n"
                      "    ctx.plot('huge', lambda ax: ax.plot([ctx['x']], [1.0], marker='o'))\n"
                      "    ctx.plot('fine', lambda ax: ax.plot([0.0, 1.0], [2.0, 1.0]))\n")
    res = run_scenario(str(script), out=tmp_path / "o", quiet=True)
    out = Path(res["out"])
    assert sorted(p.name for p in out.iterdir()) == ["fine.png", "report.md", "results.json", "run.log", "t.csv"]
    assert json.loads((out / "results.json").read_text())["plots"] == ["fine.png"]
    report = (out / "report.md").read_text()
    said = "matplotlib could not lay out its axes: ValueError: "
    assert f"(No plot `huge.png`: {said}" in report and "![fine.png](fine.png)" in report
    assert "huge.png" not in report.replace("(No plot `huge.png`", "")
    assert f"note: no plot huge.png: {said}" in (out / "run.log").read_text()
    res = run_scenario(str(script), out=tmp_path / "o2", overrides={"x": 3.0}, quiet=True)  # a value it lays out
    assert sorted(p.name for p in Path(res["out"]).glob("*.png")) == ["fine.png", "huge.png"]
    assert "No plot" not in (Path(res["out"]) / "report.md").read_text()


def test_a_plot_that_fails_for_another_reason_is_the_scenario_s_error_not_a_layout_one(tmp_path):
    # save_figure took every ValueError of matplotlib's drawing for axes it cannot lay out: a
    # scenario's own mistake (a title that is not valid mathtext, raised at savefig) was a note
    # "matplotlib could not lay out its axes" and the run went on without the plot
    pytest.importorskip("matplotlib")
    script = tmp_path / "scn.py"
    script.write_text("PARAMS = {}\n"
                      "def run(ctx):\n"
                      "    ctx.table('t', [{'k': 'a', 'm': 1.0}])\n"
                      "    ctx.plot('bad', lambda ax: (ax.plot([0.0, 1.0], [2.0, 1.0]), ax.set_title(r'$\\frac{1}$')))\n")
    with pytest.raises(ValueError, match=r"Expected \\frac\{num\}\{den\}"):
        run_scenario(str(script), out=tmp_path / "o", quiet=True)
    assert list(tmp_path.glob("o*")) == [] and list(tmp_path.glob(".o*")) == []


def test_a_table_has_the_columns_of_every_row_not_only_the_first(tmp_path):
    """A protocol whose last evaluation reports a figure the earlier ones do not (a plug-in's
    `top_overlap`, computed once at the end) lost it from metrics.csv and report.md: the table's
    columns were the first row's keys."""
    from fedsim.experiment.context import RunContext

    ctx = RunContext(name="t", config={}, data="tiny", seed=0, net=None, out=tmp_path, quiet=True)
    ctx.table("metrics", [{"round": 0, "n": 3}, {"round": 1, "n": 3, "overlap": 0.8}, {"round": 2, "late": 1}])
    assert (tmp_path / "metrics.csv").read_text().splitlines() == [
        "round,n,overlap,late", "0,3,,", "1,3,0.8,", "2,,,1"]
    ctx.table("chosen", [{"a": 1, "b": 2}], columns=["b"])  # given columns are kept as given
    assert (tmp_path / "chosen.csv").read_text().splitlines() == ["b", "2"]


@pytest.mark.parametrize("beat_every", [None, 2.0])
def test_the_display_keeps_a_beating_worker_and_drops_one_silent_for_its_beats(monkeypatch, beat_every):
    # the display dropped a worker silent for a bare 5 s, whatever the workers' beat (BEAT_EVERY):
    # a beat of 2 s would have had each worker shown and dropped in turn. Now it drops one silent
    # for SILENT_BEATS beats (live.silent_after()), and keeps one that beats at BEAT_EVERY
    from types import SimpleNamespace

    from fedsim.experiment import context, live

    if beat_every is not None:
        monkeypatch.setattr(live, "BEAT_EVERY", beat_every)
    every = live.BEAT_EVERY
    expiry = live.SILENT_BEATS * every
    assert live.silent_after() == expiry == (5.0 if beat_every is None else 10.0)
    now = [100.0]
    monkeypatch.setattr(context, "time", SimpleNamespace(monotonic=lambda: now[0]))
    p = Progress(False)
    beating, silent = {"round": 1, "messages": 10, "sim_time": 1.0}, {"round": 2, "messages": 20, "sim_time": 2.0}
    p.beat(("worker", 1), beating)
    p.beat(("worker", 2), silent)
    seen = []
    for k in range(1, 13):  # 12 beats: longer than the old 5 s, and than the expiry
        now[0] = 100.0 + k * every
        p.beat(("worker", 1), beating)
        now[0] += every / 2  # (the display reads between two beats)
        seen.append((round(now[0] - 100.0, 6), len(p._live())))
        assert p._live()[0] is beating
    # the silent one stays up to the expiry (5 beats after its only one), and no longer
    assert seen == [(round((k + 0.5) * every, 6), 2 if (k + 0.5) * every <= expiry else 1) for k in range(1, 13)]
    assert [n for _, n in seen] == [2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1]
    now[0] = 200.0  # (exactly the expiry after their last beats: still shown, dropped just after)
    p.beat(("worker", 1), beating)
    p.beat(("worker", 2), silent)
    now[0] += expiry
    assert p._live() == [beating, silent]
    now[0] += 1e-6
    assert p._live() == []


@pytest.mark.parametrize("transport", ["sim", "asyncio", "tcp"])
def test_a_protocol_run_on_a_real_transport_calls_its_duration_measured(tmp_path, transport):
    # `fedsim run NAME --transport asyncio|tcp`: the summary's `simulated_s` held the run's real
    # seconds (the clock of a real transport), under the simulator's name; results.json already
    # told them apart (simulated_time, measured_time)
    import csv

    from fedsim.kernel import NetSpec

    res = run_scenario("demo", out=tmp_path / transport, net=NetSpec(transport=transport, profile="ideal"),
                       overrides={"rounds": 2}, quiet=True)
    with open(Path(res["out"]) / "summary.csv", newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    saved = json.loads((Path(res["out"]) / "results.json").read_text())
    if transport == "sim":
        assert list(row)[:3] == ["protocol", "rounds", "simulated_s"] and "measured_s" not in row
        assert float(row["simulated_s"]) == saved["simulated_time_s"]
    else:
        assert list(row)[:3] == ["protocol", "rounds", "measured_s"] and "simulated_s" not in row
        assert float(row["measured_s"]) == saved["measured_time_s"] > 0


def test_a_protocol_without_an_accounting_unit_says_why_its_units_are_nan(tmp_path):
    # PersonalFR declares no unit (no latent dimension): its kinds and roles tables showed units
    # and units_per_node of nan with no word of why
    import csv

    from fedsim.experiment import run_scenario

    run_scenario("personalfr", data="tiny", out=tmp_path / "p", quiet=True, overrides={"clients": 5, "rounds": 2})
    run_scenario("fedrec", data="tiny", out=tmp_path / "f", quiet=True, overrides={"T": 1})
    with open(tmp_path / "p" / "roles.csv", newline="") as fh:
        assert {r["units_per_node"] for r in csv.DictReader(fh)} == {""}  # NaN
    said = ("The `units` and `units_per_node` columns are NaN: protocol `personalfr` declares no accounting unit "
            "(`net.set_unit(d)`: d floats, a latent vector, make one unit); its traffic is in bytes.")
    assert said in (tmp_path / "p" / "report.md").read_text()
    assert "columns are NaN" not in (tmp_path / "f" / "report.md").read_text()
