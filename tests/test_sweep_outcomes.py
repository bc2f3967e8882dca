"""What a sweep says of points that did not go as planned (issue 25, point 1): failed points are
named as missing from the combined tables, a point whose run was incomplete (faults, a deadline)
carries that in the sweep's points table, and points run by another fedsim are reported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fedsim.experiment import UsageError
from fedsim.studies.sweep import SweepInterrupted, run_sweep


def fedsim_cmd(*args, cwd, timeout=180):
    return subprocess.run([sys.executable, "-m", "fedsim", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


def _script(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "scn.py"
    script.write_text("from fedsim.experiment import Param\nPARAMS = {'x': Param(0, 'x')}\n" + body)
    return script


def test_a_sweep_with_failed_points_says_its_tables_do_not_cover_the_grid(tmp_path):
    # report.md said "2 of 4 points finished. Finished." above tables and plots of the points that
    # happened to finish, as if they were the grid's
    script = _script(tmp_path, "def run(ctx):\n"
                               "    if ctx['x'] in (2, 3):\n        raise RuntimeError('no')\n"
                               "    ctx.table('t', [{'m': ctx['x'] * 10}])\n")
    out = tmp_path / "sw"
    s = run_sweep(str(script), {"x": [1, 2, 3, 4]}, out, workers=1)
    assert [f["point"] for f in s["failed"]] == [{"x": 2}, {"x": 3}]
    report = (out / "report.md").read_text()
    assert ("2 of 4 points finished. **Incomplete: 2 point(s) failed** (`x=2`, `x=3`; each folder's error.txt "
            "has the error): the tables and plots below cover the 2 points that finished, not the whole grid. "
            "Run the same command again to retry the failed points.") in report
    assert "Finished." not in report
    assert (out / "combined_t.csv").read_text().splitlines() == ["x,m", "1,10", "4,40"]


def test_a_point_whose_run_was_incomplete_is_flagged_in_the_sweep(tmp_path):
    # a protocol run under loss with a deadline says **Incomplete.** in its own report.md; the
    # sweep showed the point as "done" like any other, and its closing line said nothing
    out = tmp_path / "sw"
    res = fedsim_cmd("sweep", "fedrecpp", "--grid", "loss=0,0.2", "--set", "T=2", "--set", "d=4",
                     "--set", "deadline=1.0", "--profile", "lan", "--workers", "1", "--out", str(out), "--quiet",
                     cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("sweep: 2 points, 2 run, 0 already done, 0 failed, 1 with caveats "
                                 "(incomplete: report.md); results in "), res.stdout
    assert json.loads((out / "loss=0.0" / "results.json").read_text())["caveats"] == []
    assert json.loads((out / "loss=0.2" / "results.json").read_text())["caveats"] == ["incomplete"]
    assert "**Incomplete.**" in (out / "loss=0.2" / "report.md").read_text()
    state = json.loads((out / "sweep.json").read_text())
    assert {p["point"]["loss"]: p["caveats"] for p in state["points"]} == {0.0: [], 0.2: ["incomplete"]}
    report = (out / "report.md").read_text()
    assert ("**1 of the 2 finished points have caveats** (incomplete: the `caveats` column; each point's "
            "report.md says what)") in report
    rows = [ln for ln in report.splitlines() if ln.startswith("| 0.")]
    assert rows[0].startswith("| 0.0 | done |") and rows[0].endswith("|  | [loss=0.0](loss=0.0/report.md) |")
    assert rows[1].startswith("| 0.2 | done |") and rows[1].endswith("| incomplete | [loss=0.2](loss=0.2/report.md) |")
    # and so does a resumed sweep, from the point's results.json
    res = fedsim_cmd("sweep", "fedrecpp", "--grid", "loss=0,0.2", "--set", "T=2", "--set", "d=4",
                     "--set", "deadline=1.0", "--profile", "lan", "--workers", "1", "--out", str(out), "--quiet",
                     cwd=tmp_path)
    assert res.stdout.startswith("sweep: 2 points, 0 run, 2 already done, 0 failed, 1 with caveats "
                                 "(incomplete: report.md)"), res.stdout


def test_points_run_by_another_fedsim_are_reported(tmp_path):
    # a sweep resumed after upgrading fedsim combined the old points with the new ones silently
    script = _script(tmp_path, "def run(ctx):\n    ctx.table('t', [{'m': ctx['x'] * 10}])\n")
    out = tmp_path / "sw"
    run_sweep(str(script), {"x": [1]}, out, workers=1)
    old = out / "x=1" / "results.json"
    saved = json.loads(old.read_text())
    saved["versions"]["fedsim"], saved["git_revision"] = "0.0.1", "0123456789abcdef0123"
    old.write_text(json.dumps(saved))
    res = fedsim_cmd("sweep", str(script), "--grid", "x=1,2", "--workers", "1", "--out", str(out), "--quiet",
                     cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("sweep: 2 points, 1 run, 1 already done, 0 failed; results in ")
    now = json.loads((out / "x=2" / "results.json").read_text())
    now_label = now["versions"]["fedsim"] + (f" ({now['git_revision'][:12]}" + ("-dirty" if now["git_revision"].endswith("-dirty") else "") + ")"
                                             if now["git_revision"] else "")
    assert res.stderr.splitlines() == [
        f"warning: the points were run by different fedsims (0.0.1 (0123456789ab): 1 point(s); {now_label}: "
        "1 point(s)); their figures may not be comparable (report.md's fedsim column)"]
    report = (out / "report.md").read_text()
    assert (f"**Run by different fedsims** (the `fedsim` column): fedsim 0.0.1 (0123456789ab): 1 point(s); "
            f"fedsim {now_label}: 1 point(s).") in report
    assert "| 1 | done before |  | 0.0.1 (0123456789ab) | [x=1](x=1/report.md) |" in report
    state = json.loads((out / "sweep.json").read_text())
    assert [p["fedsim"] for p in state["points"]] == ["0.0.1 (0123456789ab)", now_label]


def test_a_running_or_killed_sweeps_report_does_not_claim_the_previous_one(tmp_path):
    # the combined files and report.md were written when a sweep ended: while a --force re-run ran,
    # or after it was killed (SIGKILL), they still said "2 of 2 points finished. Finished." with
    # the rows of the old configuration, whose folders the re-run was replacing
    import os
    import signal
    import time

    log, hold = tmp_path / "runs.log", tmp_path / "hold"
    hold.write_text("")
    script = tmp_path / "scn.py"
    script.write_text("import os, time\nfrom fedsim.experiment import Param\n"
                      "PARAMS = {'x': Param(0, 'x'), 'y': Param(0, 'y')}\n"
                      "def run(ctx):\n"
                      f"    open({str(log)!r}, 'a').write(f\"{{ctx['x']}},{{ctx['y']}}\\n\")\n"
                      f"    if ctx['x'] == 2 and ctx['y'] == 5 and os.path.exists({str(hold)!r}):\n"
                      "        time.sleep(60)\n"
                      "    ctx.table('t', [{'m': ctx['x'] * 10 + ctx['y']}])\n")
    out = tmp_path / "sw"
    run_sweep(str(script), {"x": [1, 2]}, out, fixed={"y": 4}, workers=1)
    assert (out / "combined_t.csv").read_text().splitlines() == ["x,m", "1,14", "2,24"]
    args = [sys.executable, "-m", "fedsim", "sweep", str(script), "--grid", "x=1,2", "--set", "y=5", "--force",
            "--workers", "1", "--out", str(out), "--quiet"]
    proc = subprocess.Popen(args, cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and "2,5" not in (log.read_text() if log.exists() else ""):
            time.sleep(0.05)
        assert "2,5" in log.read_text(), "the point x=2 did not start"
        report = (out / "report.md").read_text()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert "Finished." not in report and "| 14 |" not in report
    assert "0 of 2 points finished. **Running, or killed**" in report
    assert not (out / "combined_t.csv").exists()  # no point of this configuration was done when it started
    assert json.loads((out / "sweep.json").read_text())["state"] == "running"
    # the same command again runs x=2 only (still of y=4), and the report is the finished sweep's
    log.write_text("")
    hold.unlink()
    res = fedsim_cmd(*args[3:], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert log.read_text() == "2,5\n"
    assert (out / "combined_t.csv").read_text().splitlines() == ["x,m", "1,15", "2,25"]
    assert "2 of 2 points finished. Finished." in (out / "report.md").read_text()


def test_the_eta_leaves_failed_points_out_of_the_rate(tmp_path, monkeypatch):
    # two points that failed at once made the three left (1.5 s each) look as fast: "2/5, ETA 105 ms"
    import fedsim.experiment.context as context

    now = [100.0]
    monkeypatch.setattr(context.time, "monotonic", lambda: now[0])
    log = tmp_path / "sweep.log"
    p = context.Progress(False, log=log)
    p.update(0, 5, stage="sweep s")
    for t, done, failed in ((100.05, 1, 1), (100.1, 2, 2), (101.6, 3, 2), (103.1, 4, 2)):
        now[0] = t
        p.update(done, 5, failed=failed)
    p.finish()
    lines = [ln.split("] ", 1)[1] for ln in log.read_text().splitlines()]
    assert lines[1:5] == ["sweep s 1/5 (1 failed), elapsed 50 ms", "sweep s 2/5 (2 failed), elapsed 100 ms",
                          "sweep s 3/5 (2 failed), elapsed 1.6 s, ETA 3.2 s",
                          "sweep s 4/5 (2 failed), elapsed 3.1 s, ETA 1.55 s"]


def test_the_sweep_tells_its_progress_which_points_failed(tmp_path):
    script = _script(tmp_path, "def run(ctx):\n"
                               "    if ctx['x'] == 1:\n        raise RuntimeError('no')\n"
                               "    ctx.table('t', [{'m': ctx['x']}])\n")
    out = tmp_path / "sw"
    run_sweep(str(script), {"x": [1, 2, 3]}, out, workers=1)
    log = (out / "sweep.log").read_text()
    assert "sweep scn 1/3 (1 failed), elapsed " in log and "ETA" not in log.split("1/3 (1 failed)")[1].split("\n")[0]
    assert "sweep scn 2/3 (1 failed), elapsed " in log


def test_a_value_that_is_not_there_is_an_empty_cell_and_the_rest_still_plots(tmp_path):
    # a point's None (deadline_s of a run without a deadline) was written "None": the combined
    # column read as text, so it had no plot, and pandas or NumPy read it as a string
    import csv

    import pytest

    pytest.importorskip("matplotlib")
    script = tmp_path / "scn.py"
    script.write_text("from fedsim.experiment import Param\nPARAMS = {'x': Param(0.0, 'x')}\n"
                      "def run(ctx):\n    ctx.table('t', [{'k': 'a', 'm': None if ctx['x'] == 2 else ctx['x'] * 10}])\n")
    out = tmp_path / "sw"
    s = run_sweep(str(script), {"x": [1.0, 2.0, 3.0]}, out, workers=1)
    assert not s["failed"]
    assert (out / "x=2.0" / "t.csv").read_text() == "k,m\na,\n"
    with open(out / "combined_t.csv", newline="") as fh:
        assert [(r["x"], r["m"]) for r in csv.DictReader(fh)] == [("1.0", "10.0"), ("2.0", ""), ("3.0", "30.0")]
    assert "![sweep_t_m.png](sweep_t_m.png)" in (out / "report.md").read_text()
    assert (out / "sweep_t_m.png").is_file()


def test_a_plot_matplotlib_cannot_lay_out_is_said_and_the_others_drawn(tmp_path):
    # a grid value near the float maximum (--grid rho=1e308): matplotlib's ticks overflowed and the
    # sweep, its points done, ended in a traceback before its report
    import pytest

    pytest.importorskip("matplotlib")
    script = tmp_path / "scn.py"
    script.write_text("from fedsim.experiment import Param\nPARAMS = {'x': Param(0.0, 'x')}\n"
                      "def run(ctx):\n    ctx.table('t', [{'k': 'a', 'm': 1.0}, {'k': 'b', 'm': 2.0}])\n")
    out = tmp_path / "sw"
    s = run_sweep(str(script), {"x": [1e308]}, out, workers=1)
    assert not s["failed"]
    report = (out / "report.md").read_text()
    assert "(No plot of `m`: matplotlib could not lay out its axes: ValueError: " in report
    assert not list(out.glob("*.png")) and not list(out.glob(".*tmp*"))
    out2 = tmp_path / "sw2"  # an ordinary axis: the plot as before
    run_sweep(str(script), {"x": [1.0, 2.0]}, out2, workers=1)
    assert "![sweep_t_m.png](sweep_t_m.png)" in (out2 / "report.md").read_text()
    assert (out2 / "sweep_t_m.png").is_file()


def test_failed_points_run_again_are_counted_as_rerun_and_their_old_folders_cleared(tmp_path):
    # mutants swp12/swp13: a failed point run again was left out of the summary's ``rerun`` and of
    # the "(N of them again)" line; a failed point's folder (its error.txt) was kept when its re-run
    # was interrupted, where a point that did not finish must leave no folder (module docstring)
    modes = tmp_path / "modes"
    modes.mkdir()
    (modes / "2").write_text("fail")
    (modes / "3").write_text("fail")
    script = _script(tmp_path, "from pathlib import Path\n"
                               "def run(ctx):\n"
                               f"    mode = Path({str(modes)!r}) / str(ctx['x'])\n"
                               "    mode = mode.read_text() if mode.exists() else ''\n"
                               "    if mode == 'fail':\n        raise RuntimeError('still broken')\n"
                               "    if mode == 'stop':\n        raise KeyboardInterrupt\n"
                               "    ctx.table('t', [{'m': ctx['x'] * 10}])\n")
    out = tmp_path / "sw"
    grid = {"x": [1, 2, 3, 4]}
    first = run_sweep(str(script), grid, out, workers=1, quiet=True)
    assert [f["point"] for f in first["failed"]] == [{"x": 2}, {"x": 3}]
    assert first["rerun"] == [] and first["skipped"] == []
    for x in (2, 3):
        assert "RuntimeError: still broken" in (out / f"x={x}" / "error.txt").read_text()
        assert not (out / f"x={x}" / "results.json").exists()

    # x=2 mended, x=3 stops the sweep (a Ctrl-C) when it runs again (workers=1: after x=2)
    (modes / "2").unlink()
    (modes / "3").write_text("stop")
    with pytest.raises(SweepInterrupted) as raised:
        run_sweep(str(script), grid, out, workers=1, quiet=True)
    second = raised.value.summary
    assert second["rerun"] == [{"x": 2}, {"x": 3}]
    assert second["done"] == [{"x": 2}] and second["not_run"] == [{"x": 3}] and second["failed"] == []
    assert second["skipped"] == [{"x": 1}, {"x": 4}]
    log = [ln.split("] ", 1)[1] for ln in (out / "sweep.log").read_text().splitlines()]
    assert "sweep scn: 4 points, 2 done before, 2 to run (2 of them again)" in log
    assert not (out / "x=2" / "error.txt").exists()
    assert json.loads((out / "x=2" / "results.json").read_text())["finished"]
    assert (out / "x=2" / "t.csv").read_text().splitlines() == ["m", "20"]
    assert not (out / "x=3").exists()  # not run: no folder, not the failed run's error.txt
    state = json.loads((out / "sweep.json").read_text())
    assert {p["point"]["x"]: p["status"] for p in state["points"]} == {
        1: "done before", 2: "done", 3: "not run", 4: "done before"}

    # x=3 mended: it runs (its folder was gone: not a re-run), the others are skipped
    (modes / "3").unlink()
    third = run_sweep(str(script), grid, out, workers=1, quiet=True)
    assert third["done"] == [{"x": 3}] and third["rerun"] == [] and third["failed"] == []
    assert third["skipped"] == [{"x": 1}, {"x": 2}, {"x": 4}]
    log = [ln.split("] ", 1)[1] for ln in (out / "sweep.log").read_text().splitlines()]
    assert "sweep scn: 4 points, 3 done before, 1 to run" in log
    assert sorted(f.name for f in (out / "x=3").iterdir()) == sorted(f.name for f in (out / "x=1").iterdir())
    assert (out / "combined_t.csv").read_text().splitlines() == ["x,m", "1,10", "2,20", "3,30", "4,40"]


def test_a_sweep_of_an_empty_grid_runs_its_one_point_and_writes_its_report(tmp_path):
    # the cartesian product of no axes is one point ("default"): it ran, and then the report's plots
    # looked for an axis to plot against, an IndexError out of run_sweep over a sweep.json that said
    # "finished" and the report.md of the sweep's start
    script = _script(tmp_path, "def run(ctx):\n    ctx.table('t', [{'m': ctx['x'] * 10 + 1}, {'m': 5}])\n")
    out = tmp_path / "sw"
    s = run_sweep(str(script), {}, out, workers=1, quiet=True)
    assert (s["done"], s["failed"], s["not_run"]) == ([{}], [], [])
    assert (out / "combined_t.csv").read_text().splitlines() == ["m", "1", "5"]
    assert "1 of 1 point finished. Finished." in (out / "report.md").read_text()
    assert json.loads((out / "sweep.json").read_text())["state"] == "finished"


def test_a_sweep_stopped_by_a_real_file_size_limit_is_one_error_line_says_what_ran_and_resumes(tmp_path):
    # the points ran, then the sweep's plot grew past RLIMIT_FSIZE (a disk that fills up fails the
    # same way, in write() or close(), with no file named: tests/test_disk_full_real.py fills a real
    # tmpfs): Python's traceback, status 1. Now one error: line naming the file and what sweep.json
    # says, status 2; the same command without the limit writes the sweep's files, running no point
    import resource

    script = _script(tmp_path, "def run(ctx):\n    ctx.table('t', [{'m': ctx['x'] * 10}])\n")
    cmd = [sys.executable, "-m", "fedsim", "sweep", str(script), "--grid", "x=1,2", "--workers", "1", "--quiet",
           "--out", "sw"]

    def limit():  # 8000 bytes: each point's files and sweep.json fit, the plot (some 20 kB) does not
        resource.setrlimit(resource.RLIMIT_FSIZE, (8000, 8000))  # (Python ignores SIGXFSZ: EFBIG)

    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=180, preexec_fn=limit)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", (
        "error: the sweep stopped: File too large writing sw/sweep_t_m.png; sw/sweep.json says interrupted (2 done) "
        "(a file grew larger than the file system or the file size limit (ulimit -f) allows; raise the limit, then run "
        "the same command again: it resumes)\n"))
    out = tmp_path / "sw"
    state = json.loads((out / "sweep.json").read_text())
    assert (state["state"], [p["status"] for p in state["points"]]) == ("interrupted", ["done", "done"])
    assert "**Running, or killed**" in (out / "report.md").read_text()  # (the start's: not "Finished.")
    assert sorted(p.name for p in out.iterdir()) == [".sweep.lock", "combined_t.csv", "report.md", "sweep.json",
                                                      "sweep.log", "x=1", "x=2"]  # (no .tmp, no room file left)
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=180)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout.startswith("sweep: 2 points, 0 run, 2 already done, 0 failed; results in sw/")
    assert json.loads((out / "sweep.json").read_text())["state"] == "finished"
    assert (out / "sweep_t_m.png").stat().st_size > 8000


def test_a_point_whose_error_txt_cannot_be_written_is_failed_and_the_sweep_goes_on(tmp_path, monkeypatch):
    # on a full disk a point's run fails, and so does the writing of its error.txt: the point's
    # process raised, the sweep took it for a dead process and wrote its error.txt in turn, which
    # failed too and stopped the sweep with a traceback, its sweep.json saying "running". Now the
    # point is failed, saying its error.txt could not be written, and the other points run
    import errno

    from fedsim.studies import sweep

    script = _script(tmp_path, "def run(ctx):\n    if ctx['x'] == 1:\n        raise OSError(28, 'No space left on device')\n"
                               "    ctx.table('t', [{'m': ctx['x']}])\n")
    out = tmp_path / "sw"
    real = sweep.write_atomic

    def full_for_points(path, text):
        if Path(path).name in ("point.json", "error.txt"):  # (the points run in forked processes: patched there too)
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, text)

    monkeypatch.setattr(sweep, "write_atomic", full_for_points)
    s = run_sweep(str(script), {"x": [1, 2]}, out, workers=1, quiet=True)
    assert (s["done"], [r["point"] for r in s["failed"]]) == ([{"x": 2}], [{"x": 1}])
    why = f"No space left on device writing {out}/x=1/point.json"
    assert s["failed"][0]["unwritten"] == why
    assert sweep.failure_line(s["failed"][0]) == (
        f"failed x=1: UsageError: the run stopped: No space left on device; its output folder {out}/x=1 was not written "
        f"(free some space, or choose another --out) (its error.txt could not be written: {why})")
    state = json.loads((out / "sweep.json").read_text())
    assert (state["state"], [(p["status"], p.get("unwritten")) for p in state["points"]]) == (
        "finished", [("failed", why), ("done", None)])
    assert list((out / "x=1").iterdir()) == []  # (no error.txt: run again on resume, as a corrupt folder)
    monkeypatch.undo()
    s = run_sweep(str(script), {"x": [1, 2]}, out, workers=1, quiet=True)
    assert (s["rerun"], s["skipped"], [r["point"] for r in s["failed"]]) == ([{"x": 1}], [{"x": 2}], [{"x": 1}])
    assert (out / "x=1" / "error.txt").read_text().startswith("Traceback")


def test_an_error_writing_the_sweeps_files_after_its_points_leaves_it_interrupted_and_its_log_closed(tmp_path, monkeypatch):
    # a full disk as the sweep wrote its report after every point had run: the error went out with
    # sweep.json saying "finished" over the report.md of the sweep's start ("Running, or killed"),
    # and sweep.log left open without its closing line
    import errno

    from fedsim.studies import sweep

    script = _script(tmp_path, "def run(ctx):\n    ctx.table('t', [{'m': ctx['x'] * 10}])\n")
    out = tmp_path / "sw"
    real = sweep.write_sweep_report

    def full_disk(out, info, points, statuses, interrupted):
        if interrupted is None:  # (the report of the sweep's start is written)
            return real(out, info, points, statuses, interrupted)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sweep, "write_sweep_report", full_disk)
    with pytest.raises(UsageError) as exc:  # (it was the OSError itself: a traceback on the command line)
        run_sweep(str(script), {"x": [1, 2]}, out, workers=1, quiet=True)
    assert str(exc.value) == (f"the sweep stopped: No space left on device; {out}/sweep.json says interrupted (2 done) "
                              "(free some space, then run the same command again: it resumes)")
    state = json.loads((out / "sweep.json").read_text())
    assert (state["state"], [p["status"] for p in state["points"]]) == ("interrupted", ["done", "done"])
    assert "0 of 2 points finished. **Running, or killed**" in (out / "report.md").read_text()
    assert (out / "sweep.log").read_text().splitlines()[-1].endswith("] interrupted")
    monkeypatch.undo()
    s = run_sweep(str(script), {"x": [1, 2]}, out, workers=1, quiet=True)  # the same command finishes it
    assert (s["done"], s["skipped"]) == ([], [{"x": 1}, {"x": 2}])
    assert json.loads((out / "sweep.json").read_text())["state"] == "finished"
    assert "2 of 2 points finished. Finished." in (out / "report.md").read_text()
