"""Sweeps keyed by configuration (issue 24) and stopped cleanly (issue 20): stale points refused or
re-run, the default folder resumes, any run option is a grid axis, a combined report, corrupted
points re-run, Ctrl-C (a real SIGINT) stops every worker promptly and marks points not run."""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedsim.experiment import UsageError, run_scenario
from fedsim.studies.sweep import run_sweep


def fedsim_cmd(*args, cwd, timeout=180):
    return subprocess.run([sys.executable, "-m", "fedsim", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


def logging_scenario(tmp_path: Path, sleep: float = 0.0) -> tuple[Path, Path]:
    """A scenario script that appends 'x,y,pid' to a log each time it runs a point."""
    log = tmp_path / "runs.log"
    script = tmp_path / "logged.py"
    script.write_text(
        "import os, time\n"
        "from fedsim.experiment import Param\n"
        "PARAMS = {'x': Param(0, 'x'), 'y': Param(0, 'y')}\n"
        "def run(ctx):\n"
        f"    with open({str(log)!r}, 'a') as fh:\n"
        "        fh.write(f\"{ctx['x']},{ctx['y']},{os.getpid()}\\n\")\n"
        f"    time.sleep({sleep})\n"
        "    ctx.table('t', [{'x': ctx['x'], 'y': ctx['y'], 'z': ctx['x'] * 10 + ctx['y'], 'label': 'a'}])\n")
    return script, log


def ran(log: Path) -> list[tuple[int, int]]:
    if not log.exists():
        return []
    return [tuple(int(v) for v in ln.split(",")[:2]) for ln in log.read_text().split()]


def test_another_set_value_is_refused_then_force_reruns_only_the_changed_points(tmp_path):
    script, log = logging_scenario(tmp_path)
    out = tmp_path / "sw"
    base = ("sweep", str(script), "--workers", "1", "--out", str(out), "--quiet")
    res = fedsim_cmd(*base, "--grid", "x=1,2", "--set", "y=3", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert sorted(ran(log)) == [(1, 3), (2, 3)]
    # the case: the same --out, another --set value
    res = fedsim_cmd(*base, "--grid", "x=1,2", "--set", "y=4", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {out} holds 2 point(s) run with another configuration")
    assert "x=1: y=3, now 4" in err[0] and "--force" in err[0]
    assert json.loads((out / "x=1" / "results.json").read_text())["config"]["y"] == 3  # nothing changed
    assert len(ran(log)) == 2
    # change one point only: x=1 with y=4 (x=2 is not in this grid)
    assert fedsim_cmd(*base, "--grid", "x=1", "--set", "y=4", "--force", cwd=tmp_path).returncode == 0
    assert ran(log)[2:] == [(1, 4)]
    # now x=1 has y=4 and x=2 has y=3: --force re-runs x=2 alone
    res = fedsim_cmd(*base, "--grid", "x=1,2", "--set", "y=4", "--force", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert ran(log)[3:] == [(2, 4)]
    assert "1 run (1 of them again), 1 already done" in res.stdout
    for x in (1, 2):
        assert json.loads((out / f"x={x}" / "results.json").read_text())["config"] == {"x": x, "y": 4}
    sweep = json.loads((out / "sweep.json").read_text())
    assert sweep["fixed"] == {"y": 4} and sweep["state"] == "finished"
    # the table's own x (named like the grid axis) as t.x: one column per name
    assert (out / "combined_t.csv").read_text().splitlines() == ["x,t.x,y,z,label", "1,1,4,14,a", "2,2,4,24,a"]


def test_the_same_command_without_out_resumes_in_the_same_folder(tmp_path):
    script, log = logging_scenario(tmp_path)
    args = ("sweep", str(script), "--grid", "x=1,2", "--workers", "1", "--quiet")
    first = fedsim_cmd(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    again = fedsim_cmd(*args, cwd=tmp_path)
    assert again.returncode == 0 and "0 run, 2 already done" in again.stdout
    folders = list((tmp_path / "runs").iterdir())
    assert len(folders) == 1 and folders[0].name.startswith("sweep-logged-")
    assert len(ran(log)) == 2
    # a grid extended by one value reuses the folder and runs the new point only
    more = fedsim_cmd("sweep", str(script), "--grid", "x=1,2,3", "--workers", "1", "--quiet", cwd=tmp_path)
    assert "1 run, 2 already done" in more.stdout and len(list((tmp_path / "runs").iterdir())) == 1
    assert ran(log)[2:] == [(3, 0)]
    # another fixed value is another sweep: another folder
    fedsim_cmd(*args, "--set", "y=1", cwd=tmp_path)
    assert len(list((tmp_path / "runs").iterdir())) == 2


def test_profile_and_seed_are_grid_axes_with_a_combined_report(tmp_path):
    out = tmp_path / "sw"
    res = fedsim_cmd("sweep", "demo", "--grid", "profile=lan,wan", "--grid", "seed=0,1", "--set", "rounds=2",
                     "--workers", "2", "--out", str(out), "--quiet", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    seen = set()
    for d in out.glob("*/results.json"):
        saved = json.loads(d.read_text())
        assert d.parent.name == f"profile={saved['network']['profile']},seed={saved['seed']}"
        seen.add((saved["network"]["profile"], saved["seed"]))
        assert saved["config"]["rounds"] == 2
    assert seen == {("lan", 0), ("lan", 1), ("wan", 0), ("wan", 1)}
    # the simulated time differs between the profiles (the axis took effect), not between seeds' folders
    rows = (out / "combined_summary.csv").read_text().splitlines()
    head = rows[0].split(",")
    sim = {(r.split(",")[0], r.split(",")[1]): float(r.split(",")[head.index("simulated_s")]) for r in rows[1:]}
    assert sim[("wan", "0")] > sim[("lan", "0")] > 0
    report = (out / "report.md").read_text()
    assert report.startswith("# Sweep of demo") and "4 of 4 points finished" in report
    assert "| wan | 1 | done |" in report
    pytest.importorskip("matplotlib")
    pngs = sorted(p.name for p in out.glob("sweep_summary_*.png"))
    assert "sweep_summary_simulated_s.png" in pngs and "![sweep_summary_simulated_s.png]" in report
    for p in pngs:
        assert (out / p).stat().st_size > 1000 and f"]({p})" in report


def test_a_corrupted_point_is_detected_and_rerun(tmp_path):
    script, log = logging_scenario(tmp_path)
    out = tmp_path / "sw"
    run_sweep(str(script), {"x": [1, 2, 3]}, out, workers=1)
    # a truncated results.json (the old failure: counted as done, then a JSONDecodeError)
    res = out / "x=2" / "results.json"
    res.write_text(res.read_text()[:40])
    (out / "x=3" / "t.csv").unlink()  # a table it lists is missing
    s = run_sweep(str(script), {"x": [1, 2, 3]}, out, workers=1)
    assert sorted(map(str, s["rerun"])) == ["{'x': 2}", "{'x': 3}"] and len(s["skipped"]) == 1
    assert ran(log)[3:] == [(2, 0), (3, 0)]
    assert json.loads(res.read_text())["config"]["x"] == 2
    assert (out / "combined_t.csv").read_text().splitlines()[1:] == ["1,1,0,10,a", "2,2,0,20,a", "3,3,0,30,a"]


def test_stale_points_are_refused_through_the_api_too(tmp_path):
    script, _ = logging_scenario(tmp_path)
    run_sweep(str(script), {"x": [1]}, tmp_path / "sw", fixed={"y": 1}, workers=1)
    with pytest.raises(UsageError, match="another configuration"):
        run_sweep(str(script), {"x": [1]}, tmp_path / "sw", fixed={"y": 2}, workers=1)
    s = run_sweep(str(script), {"x": [1]}, tmp_path / "sw", fixed={"y": 2}, workers=1, force=True)
    assert s["rerun"] == [{"x": 1}]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("to_group", [False, True], ids=["sigint-to-parent", "ctrl-c-to-process-group"])
def test_ctrl_c_stops_every_worker_promptly_and_marks_points_not_run(tmp_path, to_group):
    script, log = logging_scenario(tmp_path, sleep=30.0)  # each point would take 30 s
    out = tmp_path / "sw"
    args = [sys.executable, "-m", "fedsim", "sweep", str(script), "--grid", "x=1,2,3,4,5,6", "--workers", "2",
            "--out", str(out)]
    proc = subprocess.Popen(args, cwd=tmp_path, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and len(ran(log)) < 2:  # both workers inside a point
        time.sleep(0.05)
    assert len(ran(log)) == 2, "the workers did not start"
    pids = [int(ln.split(",")[2]) for ln in log.read_text().split()]
    t0 = time.time()
    if to_group:
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    else:
        proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    took = time.time() - t0
    assert proc.returncode == 130, (stdout, stderr)
    assert took < 15, f"took {took:.1f} s to stop"
    assert "Traceback" not in stderr and "interrupted: 0 points run, 0 done before, 6 not run" in stderr
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids), "a worker survived"
    assert len(ran(log)) == 2, "queued points started after Ctrl-C"
    # nothing claims to be failed or finished; no partial folders
    assert not list(out.rglob("error.txt")) and not list(out.glob("x=*")) and not list(out.glob(".*partial*")), (
        f"took {took:.1f} s", sorted(p.name for p in out.iterdir()), (out / "sweep.log").read_text())
    sweep = json.loads((out / "sweep.json").read_text())
    assert sweep["state"] == "interrupted" and {p["status"] for p in sweep["points"]} == {"not run"}
    assert "**Interrupted**" in (out / "report.md").read_text()


def test_interrupted_sweep_report_covers_the_finished_points_and_resumes(tmp_path):
    script, log = logging_scenario(tmp_path, sleep=0.0)
    slow = tmp_path / "slow.py"
    slow.write_text(script.read_text().replace("time.sleep(0.0)", "time.sleep(30.0 if ctx['x'] == 3 else 0)"))
    out = tmp_path / "sw"
    args = [sys.executable, "-m", "fedsim", "sweep", str(slow), "--grid", "x=1,2,3", "--workers", "1",
            "--out", str(out), "--quiet"]
    proc = subprocess.Popen(args, cwd=tmp_path, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and (3, 0) not in ran(log):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "interrupted: 2 points run, 0 done before, 1 not run" in stderr
    assert (out / "combined_t.csv").read_text().splitlines()[1:] == ["1,1,0,10,a", "2,2,0,20,a"]
    report = (out / "report.md").read_text()
    assert "2 of 3 points finished" in report and "| 3 | not run |" in report
    slow.write_text(script.read_text())  # the same configuration, now quick: resume
    res = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "1 run, 2 already done" in res.stdout
    assert [p for p in ran(log)].count((3, 0)) == 2 and ran(log).count((1, 0)) == 1


def test_ctrl_c_while_the_sweep_writes_its_files_is_an_interrupted_sweep_that_resumes(tmp_path, monkeypatch, capsys):
    # every point ran, then a Ctrl-C while the end's report and plots were written (they take a
    # while): it passed as a plain KeyboardInterrupt, "interrupted: the run's output folder was
    # not written" said the command line, over a sweep.json saying "finished" and the report of
    # the sweep's start ("0 of 2 points finished. Running, or killed")
    from fedsim import cli
    from fedsim.studies import sweep

    script, log = logging_scenario(tmp_path)
    real = sweep.write_sweep_report

    def interrupted_at_the_end(out, info, points, statuses, interrupted):
        if interrupted is not None:  # the report written as the sweep ends (None: as it starts)
            raise KeyboardInterrupt
        return real(out, info, points, statuses, interrupted)

    monkeypatch.setattr(sweep, "write_sweep_report", interrupted_at_the_end)
    out = tmp_path / "sw"
    args = ["sweep", str(script), "--grid", "x=1,2", "--workers", "1", "--quiet", "--out", str(out)]
    assert cli.main(args) == 130
    assert capsys.readouterr().err.splitlines() == [
        f"interrupted: 2 points run, 0 done before, 0 not run; the same command resumes. Results so far in {out}/ "
        "(report.md, sweep.json)"]
    state = json.loads((out / "sweep.json").read_text())
    assert (state["state"], [p["status"] for p in state["points"]]) == ("interrupted", ["done", "done"])
    assert "0 of 2 points finished. **Running, or killed**" in (out / "report.md").read_text()
    monkeypatch.setattr(sweep, "write_sweep_report", real)
    assert cli.main(args) == 0
    assert "2 points, 0 run, 2 already done, 0 failed" in capsys.readouterr().out
    assert json.loads((out / "sweep.json").read_text())["state"] == "finished"
    assert "2 of 2 points finished. Finished." in (out / "report.md").read_text()
    assert ran(log) == [(1, 0), (2, 0)]



def test_ctrl_c_while_the_display_closes_after_the_points_is_an_interrupted_sweep(tmp_path, monkeypatch, capsys):
    # every point ran, then a (second) Ctrl-C while the progress display closed, before sweep.json
    # was rewritten: a plain KeyboardInterrupt left sweep.json "running", and the command line
    # said "the sweep ran no point and wrote nothing" of a sweep whose points had all run
    from fedsim import cli
    from fedsim.studies import sweep

    script, log = logging_scenario(tmp_path)
    closes = []

    class ClosedByCtrlC(sweep.Progress):
        def close(self):
            super().close()
            closes.append(len(closes))
            if len(closes) == 1:  # (finish closes it again)
                raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "Progress", ClosedByCtrlC)
    out = tmp_path / "sw"
    args = ["sweep", str(script), "--grid", "x=1,2", "--workers", "1", "--quiet", "--out", str(out)]
    assert cli.main(args) == 130
    assert capsys.readouterr().err.splitlines() == [
        f"interrupted: 2 points run, 0 done before, 0 not run; the same command resumes. Results so far in {out}/ "
        "(report.md, sweep.json)"]
    state = json.loads((out / "sweep.json").read_text())
    assert (state["state"], [p["status"] for p in state["points"]]) == ("interrupted", ["done", "done"])
    assert "2 of 2 points finished" in (out / "report.md").read_text()
    assert (out / "combined_t.csv").read_text().splitlines()[1:] == ["1,1,0,10,a", "2,2,0,20,a"]
    assert (out / "sweep.log").read_text().splitlines()[-1].endswith("] interrupted")
    monkeypatch.undo()
    assert cli.main(args) == 0  # (it resumes: nothing left to run)
    assert "2 points, 0 run, 2 already done, 0 failed" in capsys.readouterr().out
    assert json.loads((out / "sweep.json").read_text())["state"] == "finished"
    assert ran(log) == [(1, 0), (2, 0)]


@pytest.mark.parametrize("where", ["checking the points", "writing its start"])
def test_ctrl_c_before_any_point_ran_says_what_the_sweep_left(tmp_path, monkeypatch, capsys, where):
    # a sweep stopped as it started (checking its points, starting Ray, writing the files of its
    # start) ended with a run's words: "interrupted: the run's output folder was not written"
    from fedsim import cli
    from fedsim.studies import sweep

    script, log = logging_scenario(tmp_path)
    out = tmp_path / "sw"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    # (resolve_config: each point's configuration, before anything is written; write_sweep_report:
    # the report written as the sweep starts, after its folder and sweep.json)
    monkeypatch.setattr(sweep, "resolve_config" if where == "checking the points" else "write_sweep_report",
                        interrupted)
    args = ["sweep", str(script), "--grid", "x=1,2", "--workers", "1", "--quiet", "--out", str(out)]
    assert cli.main(args) == 130
    if where == "checking the points":
        assert capsys.readouterr().err == "interrupted: the sweep ran no point and wrote nothing\n"
        assert not out.exists()
    else:
        assert capsys.readouterr().err == f"interrupted: no point was run; the same command resumes the sweep in {out}/\n"
        assert json.loads((out / "sweep.json").read_text())["state"] == "running"
    assert ran(log) == []
    monkeypatch.undo()
    assert cli.main(args) == 0  # (it resumes)
    assert "2 points, 2 run, 0 already done, 0 failed" in capsys.readouterr().out
    assert ran(log) == [(1, 0), (2, 0)]



def test_ctrl_c_after_the_sweep_took_its_folder_before_it_wrote_there_resumes_as_said(tmp_path, monkeypatch, capsys):
    # stopped after the sweep made its folder and took its lock, before sweep.json: the line said
    # "the same command resumes the sweep in OUT/", and the same command was refused ("--out OUT is
    # not empty and holds no sweep"), the folder holding the sweep's own .sweep.lock alone
    from fedsim import cli
    from fedsim.studies import sweep

    script, log = logging_scenario(tmp_path)
    out = tmp_path / "sw"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "_remove_leftovers", interrupted)  # (the first thing done holding the lock)
    args = ["sweep", str(script), "--grid", "x=1,2", "--workers", "1", "--quiet", "--out", str(out)]
    assert cli.main(args) == 130
    assert capsys.readouterr().err == f"interrupted: no point was run; the same command resumes the sweep in {out}/\n"
    assert sorted(f.name for f in out.iterdir()) == [".sweep.lock"]
    monkeypatch.undo()
    assert cli.main(args) == 0
    assert "2 points, 2 run, 0 already done, 0 failed" in capsys.readouterr().out
    assert ran(log) == [(1, 0), (2, 0)]


def test_ctrl_c_as_the_progress_display_starts_is_an_interrupted_sweep(tmp_path, monkeypatch, capsys):
    # the sweep had written sweep.json and report.md (its start), then a Ctrl-C as its progress
    # display started (after `activate`, before the sweep's main `try`): a plain KeyboardInterrupt
    # went out, the command line said "the sweep ran no point and wrote nothing" beside the files
    # it had written, sweep.json stayed "running", and the display stayed active, its thread alive
    import threading

    from fedsim import cli
    from fedsim.experiment import live
    from fedsim.studies import sweep

    started = []

    def activate_then_ctrl_c(display):
        live.activate(display)
        started.append(display)
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "activate", activate_then_ctrl_c)
    script, log = logging_scenario(tmp_path)
    out = tmp_path / "sw"
    args = ["sweep", str(script), "--grid", "x=1,2", "--workers", "1", "--quiet", "--out", str(out)]
    assert cli.main(args) == 130
    assert capsys.readouterr().err.splitlines() == [
        f"interrupted: 0 points run, 0 done before, 2 not run; the same command resumes. Results so far in {out}/ "
        "(report.md, sweep.json)"]
    state = json.loads((out / "sweep.json").read_text())
    assert (state["state"], [p["status"] for p in state["points"]]) == ("interrupted", ["not run", "not run"])
    assert (out / "sweep.log").read_text().splitlines()[-1].endswith("] interrupted")
    assert len(started) == 1 and started[0]._thread is None
    assert not [t for t in threading.enumerate() if t.name == "fedsim-progress"]
    assert live.active() is None
    assert ran(log) == []
    monkeypatch.undo()
    assert cli.main(args) == 0  # (it resumes)
    assert "2 points, 2 run, 0 already done, 0 failed" in capsys.readouterr().out
    assert ran(log) == [(1, 0), (2, 0)]


def test_ctrl_c_while_ray_shuts_down_after_the_points_is_an_interrupted_sweep(tmp_path, monkeypatch, capsys):
    # every point ran and the sweep's files were written, then a Ctrl-C while Ray shut down (it
    # takes a while): a plain KeyboardInterrupt, and the command line said nothing had been run.
    # (A stand-in for Ray: the points run here, its shutdown is the Ctrl-C.)
    from fedsim import cli
    from fedsim.studies import raypool

    class Session:
        address, owned, startup_s, shutdown_s, cluster_cpus = None, True, 0.0, 0.0, 2.0

        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            raise KeyboardInterrupt  # (ray.shutdown interrupted)

        def describe(self):
            return "Ray stand-in"

    def points_here(fn, tasks, *, limit=None, on_done=None, on_error=None):  # (as Ray's workers would)
        for i, task in enumerate(tasks):
            on_done(i, fn(task))

    monkeypatch.setattr(raypool, "ray_available", lambda: True)
    monkeypatch.setattr(raypool, "import_ray", lambda local=True: None)
    monkeypatch.setattr(raypool, "RaySession", Session)
    monkeypatch.setattr(raypool, "ray_map", points_here)
    script, log = logging_scenario(tmp_path)
    out = tmp_path / "sw"
    assert cli.main(["sweep", str(script), "--grid", "x=1,2", "--backend", "ray", "--quiet", "--out", str(out)]) == 130
    assert capsys.readouterr().err.splitlines() == [
        f"interrupted: 2 points run, 0 done before, 0 not run; the same command resumes. Results so far in {out}/ "
        "(report.md, sweep.json)"]
    assert ran(log) == [(1, 0), (2, 0)]
    state = json.loads((out / "sweep.json").read_text())
    assert [p["status"] for p in state["points"]] == ["done", "done"]


def test_a_ray_point_that_failed_and_whose_files_cannot_be_written_says_both(tmp_path, monkeypatch):
    # a point that failed on its Ray worker, whose files (point.json, error.txt) then could not be
    # written into its folder (a full disk): its error said "the point ran, but its files could
    # not be written", and what the point raised was lost. (A stand-in for Ray, as above.)
    import errno

    from fedsim.studies import raypool
    from fedsim.studies import sweep as sweep_mod

    class Session:
        address, owned, startup_s, shutdown_s, cluster_cpus = None, True, 0.0, 0.0, 2.0

        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def describe(self):
            return "Ray stand-in"

    def points_here(fn, tasks, *, limit=None, on_done=None, on_error=None):  # (as Ray's workers would)
        for i, task in enumerate(tasks):
            on_done(i, fn(task))

    monkeypatch.setattr(raypool, "ray_available", lambda: True)
    monkeypatch.setattr(raypool, "import_ray", lambda local=True: None)
    monkeypatch.setattr(raypool, "RaySession", Session)
    monkeypatch.setattr(raypool, "ray_map", points_here)
    script = tmp_path / "fails.py"
    script.write_text("from fedsim.experiment import Param\n"
                      "PARAMS = {'x': Param(0, 'x')}\n"
                      "def run(ctx):\n"
                      "    if ctx['x'] != 1:\n"
                      "        raise ValueError(f\"x={ctx['x']} is not allowed\")\n"
                      "    ctx.table('t', [{'x': ctx['x']}])\n")
    out = tmp_path / "sw"
    store = sweep_mod._store_point

    def full_disk_for_x2(p, res):
        if p.point["x"] == 2:
            raise OSError(errno.ENOSPC, "No space left on device", p.out)
        return store(p, res)

    monkeypatch.setattr(sweep_mod, "_store_point", full_disk_for_x2)
    s = run_sweep(str(script), {"x": [1, 2, 3]}, out, backend="ray", quiet=True)
    unstored = f"OSError: [Errno 28] No space left on device: '{out / 'x=2'}'"
    error = f"ValueError: x=2 is not allowed; then its files could not be written into {out / 'x=2'}: {unstored}"
    assert [(f["point"], f["error"]) for f in s["failed"]] == [({"x": 2}, error),
                                                              ({"x": 3}, "ValueError: x=3 is not allowed")]
    text = (out / "x=2" / "error.txt").read_text()
    # the line, then the traceback the worker's error.txt held
    assert text.startswith(error + "\n\nTraceback (most recent call last):\n")
    assert text.endswith("ValueError: x=2 is not allowed\n")
    assert json.loads((out / "x=2" / "point.json").read_text())["config"] == {"x": 2}
    assert "ValueError: x=3 is not allowed" in (out / "x=3" / "error.txt").read_text()
    status = [p["status"] for p in json.loads((out / "sweep.json").read_text())["points"]]
    assert status == ["done", "failed", "failed"]


def test_a_plot_interrupted_while_written_leaves_no_hidden_file(tmp_path, monkeypatch):
    # fig.savefig into .NAME.PID.tmp.png, then a rename: a Ctrl-C during savefig left the file
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from fedsim.studies.sweep import SweepInterrupted

    script, _ = logging_scenario(tmp_path)
    real = Figure.savefig

    def interrupted(self, fname, *args, **kwargs):
        real(self, fname, *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "savefig", interrupted)
    out = tmp_path / "sw"
    raised = None
    try:
        run_sweep(str(script), {"x": [1, 2]}, out, workers=1)
    except KeyboardInterrupt as exc:  # (not pytest.raises: a plain one would end the test session)
        raised = exc
    assert sorted(p.name for p in out.glob(".*")) == [".sweep.lock"]
    assert type(raised) is SweepInterrupted and raised.summary["not_run"] == []
    assert json.loads((out / "sweep.json").read_text())["state"] == "interrupted"


def test_a_combined_table_interrupted_while_written_leaves_no_hidden_file(tmp_path, monkeypatch):
    # combined_T.csv is written into .combined_T.csv.PID.tmp, then renamed: a Ctrl-C while it was
    # written left that hidden file beside the points after the sweep had ended (the sweep's own
    # process: only the next run removed it)
    from fedsim.studies import sweep
    from fedsim.studies.sweep import SweepInterrupted

    script, _ = logging_scenario(tmp_path)
    real = sweep.write_csv
    calls = []

    def interrupted(path, rows, columns, **kwargs):
        real(path, rows, columns, **kwargs)
        calls.append(Path(path).name)
        raise KeyboardInterrupt  # (the sweep's start wrote none: no point was done before)

    monkeypatch.setattr(sweep, "write_csv", interrupted)
    out = tmp_path / "sw"
    raised = None
    try:
        run_sweep(str(script), {"x": [1, 2]}, out, workers=1, quiet=True)
    except KeyboardInterrupt as exc:  # (not pytest.raises: a plain one would end the test session)
        raised = exc
    assert calls == [f".combined_t.csv.{os.getpid()}.tmp"]
    assert sorted(p.name for p in out.glob(".*")) == [".sweep.lock"]
    assert type(raised) is SweepInterrupted and raised.summary["not_run"] == []
    assert json.loads((out / "sweep.json").read_text())["state"] == "interrupted"


def test_link_model_loss_and_data_are_grid_axes_too(tmp_path):
    from fedsim.experiment import load_scenario
    from fedsim.studies.sweep import parse_grid

    grid = parse_grid(load_scenario("demo"), ["link-model=fifo,fair", "loss=0,0.1", "data=tiny"])
    assert grid == {"link_model": ["fifo", "fair"], "loss": [0.0, 0.1], "data": ["tiny"]}
    s = run_sweep("demo", {"link_model": ["fifo", "fair"], "loss": [0.0, 0.1]}, tmp_path / "sw",
                  fixed={"rounds": 2, "deadline": 5.0}, net="lan", workers=1)
    assert len(s["done"]) == 4 and not s["failed"]
    for d in (tmp_path / "sw").glob("*/results.json"):
        net = json.loads(d.read_text())["network"]
        assert d.parent.name == f"link_model={net['link_model']},loss={net['loss']}" and net["profile"] == "lan"
    with pytest.raises(UsageError, match="link model 'tcpp'"):
        run_sweep("demo", {"link_model": ["tcpp"]}, tmp_path / "sw2", workers=1)
    assert not (tmp_path / "sw2").exists()


def test_backend_options_are_checked_before_anything_is_written(tmp_path, monkeypatch):
    """--backend/--address mistakes and a missing Ray are one-line errors (these checks need no
    Ray; tests/test_sweep_ray.py runs the Ray backend itself)."""
    script, log = logging_scenario(tmp_path)
    out = tmp_path / "sw"
    res = fedsim_cmd("sweep", str(script), "--grid", "x=1", "--address", "127.0.0.1:6379", "--out", str(out),
                     cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "error: --address is the address of a Ray cluster: it needs --backend ray"]
    res = fedsim_cmd("sweep", str(script), "--grid", "x=1", "--backend", "dask", cwd=tmp_path)
    assert res.returncode == 2 and "invalid choice: 'dask'" in res.stderr
    cfg = tmp_path / "sweep.toml"
    cfg.write_text('backend = "spark"\n[grid]\nx = [1]\n')
    res = fedsim_cmd("sweep", str(script), "--config", str(cfg), "--out", str(out), cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.strip() == f"error: {cfg}: line 1: backend: expected 'local' or 'ray', got 'spark'"
    import fedsim.studies.raypool as raypool

    monkeypatch.setattr(raypool, "ray_available", lambda: False)
    with pytest.raises(UsageError, match=r"--backend ray needs Ray, which is not installed: pip install"):
        run_sweep(str(script), {"x": [1]}, out, backend="ray")
    assert not out.exists() and not log.exists()


BLOCKING_HOOK = """import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("ray is blocked here")
sys.meta_path.insert(0, Refuse())
"""


@pytest.mark.parametrize("how", ["broken", "blocked"])
def test_a_ray_that_does_not_import_is_a_one_line_error_before_anything_is_written(tmp_path, how):
    # a Ray installed but failing as it imports (a shared library or dependency missing), or an
    # import hook refusing it, came out as a traceback (status 1) instead of one error line
    from fedsim.studies.raypool import RAY_MISSING

    site = tmp_path / "site"
    if how == "broken":
        (site / "ray").mkdir(parents=True)
        (site / "ray" / "__init__.py").write_text("raise ImportError('libfake.so: cannot open shared object file')\n")
        expected = ("error: --backend ray: Ray is installed but does not import (ImportError: libfake.so: cannot "
                    "open shared object file); reinstall it: pip install 'fedsim-rec[ray]' (or pip install ray)")
    else:
        site.mkdir()
        (site / "sitecustomize.py").write_text(BLOCKING_HOOK)
        expected = "error: " + RAY_MISSING
    script, log = logging_scenario(tmp_path)
    out = tmp_path / "sw"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(Path(__file__).resolve().parents[1])]
                                        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    res = subprocess.run([sys.executable, "-m", "fedsim", "sweep", str(script), "--grid", "x=1,2", "--backend", "ray",
                          "--out", str(out)], capture_output=True, text=True, cwd=tmp_path, timeout=180, env=env)
    assert (res.returncode, res.stderr.strip().splitlines()) == (2, [expected]), res.stderr
    assert not out.exists() and not log.exists()


def test_an_error_that_stops_a_sweep_leaves_it_interrupted_not_finished(tmp_path):
    # an error out of the run (here from the progress callback; on Ray, from writing a point's
    # files) stopped the workers and was raised, but sweep.json said "finished" and report.md
    # "Finished." over the points not run
    script, log = logging_scenario(tmp_path)
    out = tmp_path / "sw"

    def progress(i, total, res):
        raise RuntimeError("the progress display broke")

    with pytest.raises(RuntimeError, match="the progress display broke"):
        run_sweep(str(script), {"x": [1, 2, 3]}, out, workers=1, progress=progress)
    sweep = json.loads((out / "sweep.json").read_text())
    assert sweep["state"] == "interrupted"
    assert [p["status"] for p in sweep["points"]] == ["done", "not run", "not run"]
    assert "1 of 3 points finished. **Interrupted**" in (out / "report.md").read_text()
    s = run_sweep(str(script), {"x": [1, 2, 3]}, out, workers=1)
    assert s["skipped"] == [{"x": 1}] and sorted(p["x"] for p in s["done"]) == [2, 3]


def _scenario(tmp_path: Path, body: str, name: str = "scn.py") -> Path:
    script = tmp_path / name
    script.write_text("import os, signal, sys\nfrom fedsim.experiment import Param\n"
                      "PARAMS = {'x': Param(0, 'x'), 'y': Param(0, 'y')}\n" + body)
    return script


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_point_that_kills_its_process_or_exits_fails_alone(tmp_path, workers):
    # x=2 dies as an out-of-memory kill would, x=3 calls sys.exit(0), x=5 os._exit(3): each is that
    # point's failure, the other points run, and nothing claims the sweep went well
    script = _scenario(tmp_path, "def run(ctx):\n"
                       "    if ctx['x'] == 2:\n        os.kill(os.getpid(), signal.SIGKILL)\n"
                       "    if ctx['x'] == 3:\n        sys.exit(0)\n"
                       "    if ctx['x'] == 5:\n        os._exit(3)\n"
                       "    ctx.table('t', [{'x': ctx['x']}])\n")
    out = tmp_path / "sw"
    res = fedsim_cmd("sweep", str(script), "--grid", "x=1,2,3,4,5", "--workers", workers, "--out", str(out),
                     "--quiet", cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert "5 points, 2 run, 0 already done, 3 failed" in res.stdout
    state = json.loads((out / "sweep.json").read_text())
    status = {p["point"]["x"]: p["status"] for p in state["points"]}
    assert status == {1: "done", 2: "failed", 3: "failed", 4: "done", 5: "failed"}
    # the failure names the signal that killed the point's process (it said "killed by a signal")
    assert (out / "x=2" / "error.txt").read_text() == (
        "the point's process was killed by signal SIGKILL before it finished (SIGKILL: the kernel's "
        "out-of-memory killer sends it, as does kill -9)\n")
    assert "failed x=2: the point's process was killed by signal SIGKILL before it finished" in res.stderr
    # each failure line says what error.txt holds: a traceback only where the point raised (its
    # folder's error.txt held no traceback for a dead process, and the line said "traceback in")
    assert "Traceback (most recent call last):" in (out / "x=3" / "error.txt").read_text()
    assert sorted(res.stderr.splitlines()) == [
        "failed x=2: the point's process was killed by signal SIGKILL before it finished (SIGKILL: the kernel's "
        f"out-of-memory killer sends it, as does kill -9) (recorded in {out}/x=2/error.txt)",
        f"failed x=3: SystemExit: the scenario called sys.exit(0) (traceback in {out}/x=3/error.txt)",
        f"failed x=5: the point's process exited with status 3 before it finished (recorded in {out}/x=5/error.txt)"]
    assert res.stdout.splitlines()[-1].startswith(
        "sweep: 5 points, 2 run, 0 already done, 3 failed (above; each in its folder's error.txt, with the "
        "traceback of each that raised); results in ")
    assert "sys.exit(0)" in (out / "x=3" / "error.txt").read_text() or "SystemExit" in (out / "x=3" / "error.txt").read_text()
    assert (out / "x=5" / "error.txt").read_text() == "the point's process exited with status 3 before it finished\n"
    # the dead processes' temporary folders went with them (they stayed until the next sweep here)
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == [".sweep.lock"]
    assert (out / "combined_t.csv").read_text().splitlines() == ["x,t.x", "1,1", "4,4"]
    assert "2 of 5 points finished" in (out / "report.md").read_text()
    # the same command again runs the failed points only (and they fail again)
    res = fedsim_cmd("sweep", str(script), "--grid", "x=1,2,3,4,5", "--workers", workers, "--out", str(out),
                     "--quiet", cwd=tmp_path)
    assert "5 points, 0 run (3 of them again), 2 already done, 3 failed" in res.stdout


def test_combined_tables_hold_only_this_configurations_rows_aligned_by_column(tmp_path):
    # point x=2's table has a column x=1's lacks: each cell stays under its own column
    script = _scenario(tmp_path, "def run(ctx):\n"
                       "    row = {'y': ctx['y'], 'a': 1}\n"
                       "    if ctx['x'] == 2:\n        row = {'y': ctx['y'], 'extra': 9, 'a': 2}\n"
                       "    if ctx['y'] == 5 and ctx['x'] == 1:\n        raise RuntimeError('no')\n"
                       "    ctx.table('t', [row])\n")
    out = tmp_path / "sw"
    base = ("sweep", str(script), "--grid", "x=1,2", "--workers", "1", "--out", str(out), "--quiet")
    assert fedsim_cmd(*base, cwd=tmp_path).returncode == 0
    assert (out / "combined_t.csv").read_text().splitlines() == ["x,y,a,extra", "1,0,1,", "2,0,2,9"]
    # --force with y=5: x=1 fails, x=2 runs; the old x=1 folder is gone and its row with it
    res = fedsim_cmd(*base, "--set", "y=5", "--force", cwd=tmp_path)
    assert res.returncode == 1
    assert (out / "combined_t.csv").read_text().splitlines() == ["x,y,extra,a", "2,5,9,2"]
    # every point failing: no combined file is left to show rows of another run
    script.write_text(script.read_text().replace("if ctx['y'] == 5 and ctx['x'] == 1", "if ctx['y'] == 6"))
    res = fedsim_cmd(*base, "--set", "y=6", "--force", cwd=tmp_path)
    assert res.returncode == 1 and not list(out.glob("combined_*.csv"))
    assert "0 of 2 points finished" in (out / "report.md").read_text()


def test_combined_rows_skip_points_not_run_after_a_forced_change(tmp_path):
    # a --force re-run stopped (here by the point x=2 itself) before x=2 ran: x=2's folder still
    # holds the old configuration's rows, which must not be combined as this sweep's
    script = _scenario(tmp_path, "def run(ctx):\n"
                       "    if ctx['y'] == 2 and ctx['x'] == 2:\n        raise KeyboardInterrupt\n"
                       "    ctx.table('t', [{'z': ctx['x'] * 10 + ctx['y']}])\n")
    out = tmp_path / "sw"
    run_sweep(str(script), {"x": [1, 2]}, out, workers=1, fixed={"y": 1})
    assert (out / "combined_t.csv").read_text().splitlines() == ["x,z", "1,11", "2,21"]
    from fedsim.studies.sweep import SweepInterrupted

    with pytest.raises(SweepInterrupted):
        run_sweep(str(script), {"x": [1, 2]}, out, workers=1, fixed={"y": 2}, force=True)
    assert (out / "combined_t.csv").read_text().splitlines() == ["x,z", "1,12"]
    assert "1 of 2 points finished" in (out / "report.md").read_text()


def test_sweep_options_that_would_mislead_are_refused(tmp_path):
    script, log = logging_scenario(tmp_path)
    out = tmp_path / "sw"
    cases = [
        (("--grid", "x=1,2", "--set", "x=3"), "both as a fixed parameter"),
        (("--grid", "x=1,2", "--grid", "x=5"), "given twice"),
        (("--grid", "x=1,1"), "given twice"),
    ]
    for extra, msg in cases:
        res = fedsim_cmd("sweep", str(script), *extra, "--out", str(out), "--quiet", cwd=tmp_path)
        assert res.returncode == 2 and msg in res.stderr, (extra, res.stderr)
    strs = _scenario(tmp_path, "PARAMS['name'] = Param('a', 'name')\ndef run(ctx):\n    ctx.table('t', [{'n': 1}])\n",
                     "strs.py")
    res = fedsim_cmd("sweep", str(strs), "--grid", "name=a b,a_b", "--out", str(out), "--quiet", cwd=tmp_path)
    assert res.returncode == 2 and "would share the folder name=a_b" in res.stderr
    (tmp_path / "afile").write_text("x")
    res = fedsim_cmd("sweep", str(script), "--grid", "x=1", "--out", str(tmp_path / "afile"), "--quiet", cwd=tmp_path)
    assert res.returncode == 2 and "is a file" in res.stderr
    run_dir = tmp_path / "a_run"
    assert fedsim_cmd("run", str(script), "--out", str(run_dir), "--quiet", cwd=tmp_path).returncode == 0
    before = (run_dir / "report.md").read_text()
    res = fedsim_cmd("sweep", str(script), "--grid", "x=1", "--out", str(run_dir), "--quiet", cwd=tmp_path)
    assert res.returncode == 2 and "holds no sweep" in res.stderr
    assert (run_dir / "report.md").read_text() == before
    assert ran(log) == [(0, 0)]  # only the single run ran


def test_sweep_ledger_option_writes_each_points_ledger(tmp_path):
    out = tmp_path / "sw"
    res = fedsim_cmd("sweep", "demo", "--grid", "rounds=1,2", "--workers", "1", "--out", str(out), "--quiet",
                     cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert not list(out.glob("*/ledger.csv"))
    # asked for ledgers now: the points done without one run again, with one
    res = fedsim_cmd("sweep", "demo", "--grid", "rounds=1,2", "--workers", "1", "--out", str(out), "--quiet",
                     "--ledger", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "2 run (2 of them again)" in res.stdout
    for d in ("rounds=1", "rounds=2"):
        lines = (out / d / "ledger.csv").read_text().splitlines()
        assert len(lines) > 1 and "kind" in lines[0]


def test_a_ray_task_loads_the_drivers_protocol_plugins(tmp_path):
    # what a Ray worker does, without Ray: a fresh interpreter unpickles the task and runs it; the
    # plug-in file travels with the task (the local pool's forked workers inherit it instead)
    plugin = tmp_path / "plugged.py"
    plugin.write_text("from dataclasses import replace\nfrom fedsim.protocols import REGISTRY, register\n"
                      "register(replace(REGISTRY['demo'], name='demo-plugged'))\n")
    task = tmp_path / "task.pkl"
    driver = (
        "import pickle, sys\n"
        "from fedsim.protocols import load_plugins, plugin_files\n"
        f"load_plugins([{str(plugin)!r}])\n"
        "from fedsim.studies import sweep as sw\n"
        "mod = sw.load_scenario('demo-plugged')\n"
        "p = sw.SweepPoint('demo-plugged', {'rounds': 1}, 'unused', None, 0, sw.network_spec(mod), {'rounds': 1}, {})\n"
        "plugins = tuple((f, open(f, 'rb').read()) for f in plugin_files())\n"
        f"open({str(task)!r}, 'wb').write(pickle.dumps((p, None, plugins)))\n")
    subprocess.run([sys.executable, "-c", driver], check=True, timeout=60)
    plugin.rename(tmp_path / "moved.py")  # the worker's machine need not have the file
    worker = (f"import pickle\nfrom fedsim.studies.sweep import _run_point_remote\n"
              f"r = _run_point_remote(pickle.load(open({str(task)!r}, 'rb')))\n"
              "print(r['status'], r.get('error'), sorted(r['files']))\n")
    res = subprocess.run([sys.executable, "-c", worker], capture_output=True, text=True, timeout=60)
    assert res.stdout.startswith("done None") and "results.json" in res.stdout, res.stdout + res.stderr


def test_leftovers_of_killed_processes_are_removed_and_those_of_live_ones_kept(tmp_path):
    from fedsim.studies.sweep import _remove_leftovers

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    names = {}
    (tmp_path / "x=2").mkdir()
    (tmp_path / "x=2" / "results.json").write_text("{}")
    for pid, alive in ((dead.pid, False), (os.getpid(), True)):
        for name in (f".x=1.partial-{pid}-ab12cd", f".x=1.replaced-{pid}-ab12cd", f".x=2.replaced-{pid}-ab12cd"):
            (tmp_path / name).mkdir()
            (tmp_path / name / "results.json").write_text(json.dumps(name))
            names[name] = alive
        name = f".combined_t.csv.{pid}.tmp"
        (tmp_path / name).write_text("x\n")
        names[name] = alive
    _remove_leftovers(tmp_path)
    # the dead run's .x=1.replaced is put back as x=1, whose folder was missing (a --force re-run
    # killed between its renames); .x=2.replaced goes, x=2 being there
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["x=1", "x=2", *(n for n, a in names.items() if a)])
    assert json.loads((tmp_path / "x=1" / "results.json").read_text()) == f".x=1.replaced-{dead.pid}-ab12cd"
    assert (tmp_path / "x=2" / "results.json").read_text() == "{}"


def test_a_point_folder_a_killed_force_rerun_moved_aside_is_put_back_before_the_sweep_compares(tmp_path):
    # a --force re-run killed between its renames left the point's earlier folder hidden
    # (.x=1.replaced-PID-X) and no x=1: the next sweep took the point for missing and ran it, with
    # another configuration and no --force, and the hidden folder was removed unseen
    script, log = logging_scenario(tmp_path)
    out = tmp_path / "sw"
    run_sweep(str(script), {"x": [1, 2]}, out=out, workers=1)
    before = {p.name: p.read_bytes() for p in (out / "x=1").iterdir()}
    hidden = out / f".x=1.replaced-{(1 << 22) + 1}-ab12cd"  # a PID no process has here
    (out / "x=1").rename(hidden)
    again = run_sweep(str(script), {"x": [1, 2]}, out=out, workers=1)
    assert again["done"] == [] and again["skipped"] == [{"x": 1}, {"x": 2}]
    assert len(ran(log)) == 2  # the first sweep's two points, none since
    assert {p.name: p.read_bytes() for p in (out / "x=1").iterdir()} == before
    assert not list(out.glob(".x=*"))



def test_sweep_log_says_which_point_folders_recovery_put_back_or_removed_and_why(tmp_path):
    # the sweep put back (or removed) what killed runs of its points had left without a word in
    # sweep.log: a point that read as "done before" had in fact been hidden, and folders went unseen
    script, log = logging_scenario(tmp_path)
    out = tmp_path / "sw"
    run_sweep(str(script), {"x": [1, 2]}, out=out, workers=1)
    gone = (1 << 22) + 1  # a PID no process has here
    (out / "x=1").rename(out / f".x=1.replaced-{gone}-ab12cd")  # killed between its renames
    old = out / f".x=2.replaced-{gone}-cd34ef"  # killed while removing the results it replaced
    old.mkdir()
    partial = out / f".x=2.partial-{gone}-cd34ef"  # ... and its own temporary folder
    partial.mkdir()
    again = run_sweep(str(script), {"x": [1, 2]}, out=out, workers=1)
    assert again["skipped"] == [{"x": 1}, {"x": 2}] and len(ran(log)) == 2
    text = (out / "sweep.log").read_text()
    last = text[text.rindex(f"sweep {script.stem}: "):]  # this sweep's lines (the log is appended to)
    lines = [re.sub(r"^\[[ 0-9:]+\] ", "", line) for line in last.splitlines()]
    assert lines[:4] == [
        f"sweep {script.stem}: 2 points, 2 done before, 0 to run",
        f"put back the point folder x=1 from .x=1.replaced-{gone}-ab12cd: a --force re-run of the point was killed "
        "after it moved the results there aside and before it put its own in",
        f"removed .x=2.replaced-{gone}-cd34ef: the results of the point folder x=2 that a --force re-run of it "
        "replaced, left when that run was killed",
        f"removed .x=2.partial-{gone}-cd34ef: the temporary folder of a run of the point x=2 that was killed"]
    assert not list(out.glob(".x=*"))

def test_sweep_log_says_what_recovery_did_also_when_the_sweep_is_then_refused(tmp_path):
    # recovery puts point folders back before the sweep compares its points; a sweep refused then
    # (a point of another configuration, no --force) wrote nothing to sweep.log, so the put-back
    # went unrecorded
    script, log = logging_scenario(tmp_path)
    out = tmp_path / "sw"
    run_sweep(str(script), {"x": [1, 2]}, out=out, fixed={"y": 1}, workers=1)
    gone = (1 << 22) + 1  # a PID no process has here
    (out / "x=1").rename(out / f".x=1.replaced-{gone}-ab12cd")  # killed between its renames
    before = (out / "sweep.log").read_text()
    with pytest.raises(UsageError, match="run with another configuration") as refused:  # y=2: both points stale
        run_sweep(str(script), {"x": [1, 2]}, out=out, fixed={"y": 2}, workers=1)
    assert (out / "x=1" / "results.json").exists() and not list(out.glob(".x=*"))  # put back
    added = (out / "sweep.log").read_text()[len(before):]
    lines = [re.sub(r"^\[[ 0-9:]+\] ", "", line) for line in added.splitlines()]
    assert lines[0] == (f"put back the point folder x=1 from .x=1.replaced-{gone}-ab12cd: a --force re-run of the "
                        "point was killed after it moved the results there aside and before it put its own in")
    assert lines[1].startswith(f"sweep {script.stem}: refused, nothing run: {out} holds 2 point(s) run with another "
                               "configuration") and len(lines) == 2
    assert len(ran(log)) == 2  # nothing ran again
    # and sweep.log is closed: the refusal stopped its display (close) without closing the file
    # (finish), left open for as long as the error's traceback lived (here: `refused`), with a
    # ResourceWarning when it went
    logs = [fd for fd in os.listdir("/proc/self/fd")
            if os.path.realpath(f"/proc/self/fd/{fd}") == os.path.realpath(out / "sweep.log")]
    assert logs == [] and refused.type is UsageError


def test_the_same_grid_with_its_axes_in_another_order_resumes_the_same_points(tmp_path, monkeypatch):
    # the default folder's key ignores the axes' order (sorted), so `--grid y=.. --grid x=..` after
    # `--grid x=.. --grid y=..` lands in the same folder; its point folders were named in the order
    # given, so every point ran again into a second set of folders (y=3,x=1 beside x=1,y=3) and
    # the combined table and report left the first set out
    script, log = logging_scenario(tmp_path)
    monkeypatch.chdir(tmp_path)
    first = run_sweep(str(script), {"x": [1, 2], "y": [3, 4]}, workers=1)
    again = run_sweep(str(script), {"y": [3, 4], "x": [1, 2]}, workers=1)
    assert again["out"] == first["out"]
    assert again["done"] == [] and len(again["skipped"]) == 4
    assert len(ran(log)) == 4
    out = Path(first["out"])
    assert sorted(d.name for d in out.iterdir() if d.is_dir()) == ["x=1,y=3", "x=1,y=4", "x=2,y=3", "x=2,y=4"]
    # the folder keeps its sweep's order of axes (its folder names, the combined table's columns)
    assert (out / "combined_t.csv").read_text().splitlines() == [
        "x,y,t.x,t.y,z,label", "1,3,1,3,13,a", "1,4,1,4,14,a", "2,3,2,3,23,a", "2,4,2,4,24,a"]
    assert list(json.loads((out / "sweep.json").read_text())["grid"]) == ["x", "y"]
    # a new value on one axis, axes in the other order: that point only
    more = run_sweep(str(script), {"y": [3, 4, 5], "x": [1]}, out, workers=1)
    assert more["done"] == [{"x": 1, "y": 5}] and len(more["skipped"]) == 2
    assert ran(log)[4:] == [(1, 5)]


def test_a_killed_sweeps_workers_stop_with_it_and_leave_no_point_behind(tmp_path):
    # SIGKILL of the sweep alone (the out-of-memory killer, `kill -9 PID`): its workers, orphans,
    # ran their points to the end (30 s here) and wrote them, while the same command run again
    # ran those points too, two processes racing for one folder
    script, log = logging_scenario(tmp_path, sleep=30.0)
    out = tmp_path / "sw"
    args = [sys.executable, "-m", "fedsim", "sweep", str(script), "--grid", "x=1,2,3", "--workers", "2",
            "--out", str(out), "--quiet"]
    proc = subprocess.Popen(args, cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and len(ran(log)) < 2:  # both workers inside a point
            time.sleep(0.05)
        assert len(ran(log)) == 2, "the workers did not start"
        pids = [int(ln.split(",")[2]) for ln in log.read_text().split()]
        proc.kill()  # the sweep's process alone, not its group
        proc.wait()
        deadline = time.time() + 10
        while time.time() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.05)
        assert not any(_alive(p) for p in pids), "a worker outlived its sweep"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the group
        except ProcessLookupError:
            pass
    assert len(ran(log)) == 2 and not list(out.glob("x=*")) and not list(out.glob(".*partial*"))


def test_the_plot_against_a_list_valued_axis_has_every_point(tmp_path, monkeypatch):
    # the combined table holds a list value as 1+2 (as the folder name does), the plot looked its
    # rows up as 1,2: every point of more than one element was left out of the plot (only f=3 drawn)
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from matplotlib.axes import Axes

    script = tmp_path / "lists.py"
    script.write_text("from fedsim.experiment import Param\n"
                      "PARAMS = {'f': Param([1, 2], 'list')}\n"
                      "def run(ctx):\n"
                      "    ctx.table('t', [{'m': sum(ctx['f'])}])\n")
    drawn = []
    plot = Axes.plot

    def recording(self, *args, **kw):
        drawn.append((list(args[0]), list(args[1])))
        return plot(self, *args, **kw)

    monkeypatch.setattr(Axes, "plot", recording)
    s = run_sweep(str(script), {"f": [[1, 2], [3], [5, 7]]}, tmp_path / "sw", workers=1)
    assert len(s["done"]) == 3
    assert (tmp_path / "sw" / "combined_t.csv").read_text().splitlines() == ["f,m", "1+2,3", "3,3", "5+7,12"]
    assert drawn == [([0, 1, 2], [3, 3, 12])]  # one line, the three points at their ticks


def test_grid_errors_name_the_grid_and_an_axis_given_twice_in_a_grid_table_is_refused():
    # a bad grid value was reported as "--set lr: ...", naming an option the user never gave; a
    # TOML [grid] with link-model and link_model kept one of them silently
    from fedsim.experiment import load_scenario
    from fedsim.studies.sweep import check_grid, parse_grid

    demo = load_scenario("demo")
    with pytest.raises(UsageError, match=r"^--grid lr: expected float, got 'nan'$") as info:
        parse_grid(demo, ["lr=0.1,nan"])
    with pytest.raises(UsageError, match=r"^--grid rounds: ") as info:
        parse_grid(demo, ["rounds=2,-1"])
    assert "--set" not in str(info.value)
    with pytest.raises(UsageError, match=r"^grid clients: ") as info:
        check_grid(demo, {"clients": [2, 0]})
    assert "--set" not in str(info.value)
    with pytest.raises(UsageError, match="grid link_model: given twice"):
        check_grid(demo, {"link-model": ["fifo"], "link_model": ["fair"]})
    assert check_grid(demo, {"link-model": ["fifo", "fair"]}) == {"link_model": ["fifo", "fair"]}


def test_an_unknown_fixed_parameter_is_refused_as_the_grids_and_run_scenarios_are(tmp_path):
    # run_sweep's fixed keys said "unknown parameter 'round' for scenario demo", with no did-you-mean
    # nor the known names that the grid's and run_scenario's errors give; a key that was no str (in
    # fixed or in the grid) was "'int' object has no attribute 'strip'"
    from fedsim.experiment import load_scenario

    known = ", ".join(sorted(load_scenario("demo").PARAMS))
    for given, meant in (("round", "rounds"), ("ROUNDS", "rounds"), ("dims", "dim")):
        with pytest.raises(UsageError) as info:
            run_sweep("demo", {"lr": [0.1]}, tmp_path / "sw", fixed={given: 2}, workers=1, quiet=True)
        assert str(info.value) == (f"unknown parameter {given!r} for scenario demo; did you mean {meant!r}? "
                                   f"(known: {known}; see fedsim run demo --help)")
        with pytest.raises(UsageError) as same:
            run_scenario("demo", data="tiny", out=tmp_path / "run", overrides={given: 2}, quiet=True)
        assert str(same.value) == str(info.value)
    with pytest.raises(UsageError, match=r"^fixed: a key is a parameter name \(str\), got int 1$"):
        run_sweep("demo", {"lr": [0.1]}, tmp_path / "sw", fixed={1: 2}, workers=1, quiet=True)
    with pytest.raises(UsageError, match=r"^grid: a key is a parameter name \(str\), got int 1$"):
        run_sweep("demo", {1: [0.1]}, tmp_path / "sw", workers=1, quiet=True)
    assert not (tmp_path / "sw").exists() and not (tmp_path / "run").exists()


def test_a_second_sweep_into_a_folder_a_sweep_is_running_in_is_refused(tmp_path):
    # two sweeps in one folder ran the same points side by side (each point twice), and one's
    # commit of a point could remove the other's complete folder; the running sweep holds
    # out/.sweep.lock (flock), taken here as a running sweep would
    import fcntl

    script, log = logging_scenario(tmp_path)
    out = tmp_path / "sw"
    first = run_sweep(str(script), {"x": [1]}, out, workers=1, quiet=True)
    assert len(first["done"]) == 1
    with open(out / ".sweep.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.seek(0)
        held.truncate()
        held.write("pid 4242")
        held.flush()
        with pytest.raises(UsageError, match=r"another sweep is running in .*sw \(pid 4242\)"):
            run_sweep(str(script), {"x": [1, 2]}, out, workers=1, quiet=True)
    assert ran(log) == [(1, 0)]  # the refused sweep ran nothing
    second = run_sweep(str(script), {"x": [1, 2]}, out, workers=1, quiet=True)  # the lock is free again
    assert second["done"] == [{"x": 2}] and second["skipped"] == [{"x": 1}]


def test_each_failed_point_is_reported_once_with_its_error_and_its_error_file(tmp_path):
    # the failures were printed twice (as each happened, then again after the summary), the first
    # time as a Python dict ({'x': 2, 'f': [1, 2]}) and without the path of error.txt
    script = tmp_path / "fails.py"
    script.write_text("from fedsim.experiment import Param\n"
                      "PARAMS = {'x': Param(0, 'x'), 'f': Param([1, 2], 'list')}\n"
                      "def run(ctx):\n"
                      "    if ctx['x'] == 2:\n"
                      "        raise RuntimeError(f\"boom at x={ctx['x']}\\nsecond line\")\n"
                      "    ctx.table('t', [{'m': sum(ctx['f']) + ctx['x']}])\n")
    for quiet in ((), ("--quiet",)):
        out = tmp_path / f"sw{len(quiet)}"
        res = fedsim_cmd("sweep", str(script), "--grid", "x=1,2", "--grid", "f=1,2;3", "--workers", "1",
                         "--out", str(out), *quiet, cwd=tmp_path)
        assert res.returncode == 1, res.stderr
        failed = [ln for ln in res.stderr.splitlines() if "failed " in ln]  # the progress lines do not say it
        assert failed == [f"failed x=2,f=1+2: RuntimeError: boom at x=2 ... (traceback in {out}/x=2,f=1+2/error.txt)",
                          f"failed x=2,f=3: RuntimeError: boom at x=2 ... (traceback in {out}/x=2,f=3/error.txt)"]
        assert "second line" in (out / "x=2,f=1+2" / "error.txt").read_text()
        assert res.stdout.startswith("sweep: 4 points, 2 run, 0 already done, 2 failed (above; each in its folder's "
                                     "error.txt, with the traceback of each that raised); results in ")
        assert len(res.stdout.splitlines()) == 1  # nothing listed again


def test_a_list_value_is_written_one_way_everywhere_the_sweep_shows_it(tmp_path):
    # the folder names and combined tables wrote [1, 2] as 1+2, the report's grid line and points
    # table, the messages and the plot's ticks as 1,2 (the grid line read `f` = 1,2, 3: three values?)
    script = tmp_path / "lists.py"
    script.write_text("from fedsim.experiment import Param\n"
                      "PARAMS = {'f': Param([1, 2], 'list'), 'y': Param(0, 'y')}\n"
                      "def run(ctx):\n"
                      "    ctx.table('t', [{'m': sum(ctx['f'])}])\n")
    out = tmp_path / "sw"
    s = run_sweep(str(script), {"f": [[1, 2], [3]]}, out, workers=1)
    assert len(s["done"]) == 2
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["f=1+2", "f=3"]
    assert (out / "combined_t.csv").read_text().splitlines() == ["f,m", "1+2,3", "3,3"]
    report = (out / "report.md").read_text()
    assert "Grid: `f` = 1+2, 3. Fixed parameters: none." in report
    assert "| 1+2 | done |" in report and "| 3 | done |" in report and "1,2" not in report
    log = (out / "sweep.log").read_text()
    assert "done: f=1+2\n" in log and "done: f=3\n" in log
    run_sweep(str(script), {"y": [0]}, tmp_path / "fixed", fixed={"f": [1, 2]}, workers=1)
    with pytest.raises(UsageError) as e:  # a fixed list value that changed: shown the same way
        run_sweep(str(script), {"y": [0]}, tmp_path / "fixed", fixed={"f": [4, 5]}, workers=1)
    assert "point(s) run with another configuration (y=0: f=1+2, now 4+5); use --force" in str(e.value)
    with pytest.raises(UsageError) as e:
        run_sweep(str(script), {"f": [[1, 2], [1, 2]]}, out, workers=1)
    assert str(e.value) == "--grid f: the value 1+2 is given twice"
    from fedsim.studies.sweep import point_dir_name, point_label

    assert point_label({"x": 2, "f": [1, 2]}) == "x=2,f=1+2" == point_dir_name({"x": 2, "f": [1, 2]})
    assert point_label({"d": "a b"}) == "d=a b" and point_dir_name({"d": "a b"}) == "d=a_b"


def test_an_interrupted_sweep_counts_its_failed_points(tmp_path, monkeypatch, capsys):
    # Ctrl-C's line counted the points run, done before and not run, and left the failed ones out
    # (3 points: "1 points run, 0 done before, 1 not run"; now "1 point run")
    import fedsim.studies.sweep as sweep
    from fedsim import cli

    script, _ = logging_scenario(tmp_path)

    def interrupted(*a, **kw):
        raise sweep.SweepInterrupted({"done": [{"x": 1}], "skipped": [], "not_run": [{"x": 3}], "out": "sw",
                                      "failed": [{"point": {"x": 2}, "status": "failed", "error": "E: e",
                                                  "out": "sw/x=2"}]})

    monkeypatch.setattr(sweep, "run_sweep", interrupted)
    assert cli.main(["sweep", str(script), "--grid", "x=1,2,3", "--quiet"]) == 130
    assert capsys.readouterr().err.splitlines() == [
        "interrupted: 1 point run, 0 done before, 1 failed (above), 1 not run; the same command resumes. "
        "Results so far in sw/ (report.md, sweep.json)"]


def test_a_point_killed_after_the_stops_grace_leaves_no_temporary_folder(tmp_path, monkeypatch):
    # A point that does not leave when the stop's SIGTERM comes is killed (SIGKILL) once the
    # grace is over, before it can remove its temporary folder: the sweep removes it itself.
    # (The full suite once ended test_ctrl_c_stops_every_worker... with such a folder left.)
    import threading

    from fedsim.studies import parallel
    from fedsim.studies.sweep import SweepInterrupted

    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    monkeypatch.setattr(parallel, "STOP_GRACE", 0.3)  # (the points ignore SIGTERM: killed after it)
    log = tmp_path / "runs.log"
    script = _scenario(tmp_path, "import os, signal, time\n"
                       "def run(ctx):\n"
                       "    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # deaf to the stop\n"
                       f"    with open({str(log)!r}, 'a') as fh:\n"
                       "        fh.write(f\"{ctx['x']},{os.getpid()}\\n\")\n"
                       "    time.sleep(30)\n")
    out = tmp_path / "sw"

    def ctrl_c_once_both_run():
        deadline = time.time() + 60
        while time.time() < deadline and len(log.read_text().split() if log.exists() else []) < 2:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=ctrl_c_once_both_run, daemon=True).start()
    t0 = time.time()
    with pytest.raises(SweepInterrupted) as got:
        run_sweep(str(script), {"x": [1, 2, 3]}, out, workers=2, quiet=True)
    assert time.time() - t0 < 25  # (killed after the 0.3 s grace, not after their 30 s)
    assert len(log.read_text().split()) == 2 and got.value.summary["not_run"] == [{"x": 1}, {"x": 2}, {"x": 3}]
    pids = [int(ln.split(",")[1]) for ln in log.read_text().split()]
    assert not any(_alive(p) for p in pids)
    assert not list(out.glob(".*partial*")) and not list(out.glob("x=*")), sorted(p.name for p in out.iterdir())
    said = (out / "sweep.log").read_text()
    for x, pid in zip((ln.split(",")[0] for ln in log.read_text().split()), pids):
        assert re.search(rf"removed \.x={x}\.partial-{pid}-[0-9a-f]+: the temporary folder of a run of the point "
                         rf"x={x} that was killed", said), said


def test_ctrl_c_that_reaches_a_point_just_before_it_blocks_stops_it_within_the_grace(tmp_path):
    # The full suite once ended test_ctrl_c_stops_every_worker...[ctrl-c-to-process-group] with
    # .x=2.partial-PID left (status 130, under 15 s): a SIGTERM that lands after the point's
    # last look for a signal and before time.sleep's system call is handled only when the sleep
    # returns, and the point's process was killed after the 10 s grace. Here x=2 sleeps once its
    # C-level SIGTERM handler has run (a wakeup file written), with no bytecode in between: the
    # same, every time. The stop now sends SIGTERM again: the point leaves at once, not killed.
    log = tmp_path / "runs.log"
    script = _scenario(tmp_path, "import itertools, time\n"
                       "class Late:  # 30 s for time.sleep (read through __index__), given once SIGTERM has come\n"
                       "    def __init__(self, folder):\n        self.folder = folder\n"
                       "    def __index__(self):\n"
                       "        woken = os.path.join(self.folder, 'woken')\n"
                       "        signal.set_wakeup_fd(os.open(woken, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, 0o644))\n"
                       "        look = os.open(woken, os.O_RDONLY)\n"
                       f"        with open({str(log)!r}, 'a') as fh:\n"
                       "            fh.write(f'{os.getpid()}\\n')\n"
                       "        True in map(bool, map(os.lseek, itertools.repeat(look), itertools.repeat(0),\n"
                       "                              itertools.repeat(os.SEEK_END)))\n"
                       "        return 30\n"
                       "def run(ctx):\n"
                       "    time.sleep(Late(str(ctx.out)) if ctx['x'] == 2 else 30)\n")
    out = tmp_path / "sw"
    # (a plug-in sends the stop's SIGTERM again after 0.1 s, not 1 s: the test's time; without
    # the resend the point is still killed after the 10 s grace)
    (tmp_path / "resend_soon.py").write_text("from fedsim.studies import parallel\nparallel.STOP_RESEND = 0.1\n")
    proc = subprocess.Popen([sys.executable, "-m", "fedsim", "--plugin", "resend_soon.py", "sweep", str(script),
                             "--grid", "x=1,2,3", "--workers", "2", "--out", str(out)], cwd=tmp_path,
                            start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not (log.exists() and log.read_text().strip()):
        time.sleep(0.05)
    time.sleep(0.3)  # (x=1 in its sleep too)
    t0 = time.time()
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    took = time.time() - t0
    said = (out / "sweep.log").read_text()
    assert proc.returncode == 130 and "interrupted: 0 points run, 0 done before, 3 not run" in stderr, stderr
    assert "that was killed" not in said and took < 8, (f"took {took:.1f} s", said)
    assert not list(out.glob(".*partial*")) and not list(out.glob("x=*")), sorted(p.name for p in out.iterdir())


AMBIGUOUS_DROPOUT = ("--grid dropout: ambiguous for scenario personalfr: it is both the network's dropout (--dropout) "
                     "and the scenario's parameter dropout (--set dropout=); write --grid network.dropout=... for the "
                     "network's, --grid params.dropout=... for the scenario's")


def test_a_grid_key_both_network_option_and_parameter_is_refused_unless_qualified(tmp_path):
    """PersonalFR's (and FedAvg-AE's) dropout is a parameter (--set dropout=) and a network fault
    (--dropout): --grid dropout= silently swept the network's, so the model's could not be swept."""
    from fedsim.experiment import load_scenario
    from fedsim.studies.sweep import check_grid, parse_grid

    for name in ("personalfr", "fedavg-ae"):
        mod = load_scenario(name)
        with pytest.raises(UsageError) as err:
            parse_grid(mod, ["dropout=0.2,0.5"])
        assert str(err.value) == AMBIGUOUS_DROPOUT.replace("personalfr", name)
        with pytest.raises(UsageError) as err:
            check_grid(mod, {"dropout": [0.2]})
        assert str(err.value) == (f"grid dropout: ambiguous for scenario {name}: it is both the network's dropout "
                                  "(--dropout) and the scenario's parameter dropout (--set dropout=); write "
                                  "network.dropout = [...] for the network's, params.dropout = [...] for the "
                                  "scenario's")
        assert parse_grid(mod, ["params.dropout=0.2,0.5", "network.dropout=0,0.1"]) == {
            "params.dropout": [0.2, 0.5], "network.dropout": [0.0, 0.1]}
        # a TOML [grid]'s network.dropout = [...] is the table {"network": {"dropout": [...]}}
        assert check_grid(mod, {"network": {"dropout": [0.1]}, "params.dropout": [0.3]}) == {
            "network.dropout": [0.1], "params.dropout": [0.3]}
        with pytest.raises(UsageError, match=r"^--grid params.dropout: must be <= 1, got 2.0$"):
            parse_grid(mod, ["params.dropout=2"])
    # not ambiguous: the bare name, as before (same axis, folder names, sweep)
    demo = load_scenario("demo")
    assert parse_grid(demo, ["dropout=0.1", "network.loss=0.2"]) == {"dropout": [0.1], "loss": [0.2]}

    script = tmp_path / "drop.py"
    script.write_text("from fedsim.experiment import Param\n"
                      "PARAMS = {'dropout': Param(0.0, 'dropout of a model', min=0, max=1)}\n"
                      "def run(ctx):\n"
                      "    ctx.table('t', [{'d': ctx['dropout']}])\n")
    out = tmp_path / "sw"
    s = run_sweep(str(script), {"params.dropout": [0.2, 0.5], "network.dropout": [0.0]}, out, workers=1, quiet=True)
    assert len(s["done"]) == 2 and not s["failed"]
    for d in (0.2, 0.5):
        res = json.loads((out / f"params.dropout={d},network.dropout=0.0" / "results.json").read_text())
        assert res["config"]["dropout"] == d and res["network"]["dropout"] == 0.0
    with pytest.raises(UsageError, match=r"^params\.dropout: given both as a fixed parameter \(--set\) and as a grid axis"):
        run_sweep(str(script), {"params.dropout": [0.2]}, tmp_path / "sw2", fixed={"dropout": 0.1}, workers=1)


def test_the_command_line_refuses_an_ambiguous_grid_key_saying_how_to_write_each(tmp_path):
    res = fedsim_cmd("sweep", "personalfr", "--grid", "dropout=0.2,0.5", cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.strip() == f"error: {AMBIGUOUS_DROPOUT}"
    assert not (tmp_path / "runs").exists()


def test_a_config_files_grid_qualifies_an_ambiguous_key_with_a_dotted_key(tmp_path):
    (tmp_path / "bad.toml").write_text('scenario = "personalfr"\n[grid]\nnetwork.dropout = [2]\n')
    res = fedsim_cmd("sweep", "--config", "bad.toml", cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.strip() == (
        "error: bad.toml: line 3: [grid] network.dropout: expected a probability in [0, 1], got 2")
    (tmp_path / "bare.toml").write_text('scenario = "personalfr"\n[grid]\ndropout = [0.2]\n')
    res = fedsim_cmd("sweep", "--config", "bare.toml", cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.strip() == (
        "error: bare.toml: line 3: [grid] dropout: ambiguous for scenario personalfr: it is both the network's "
        "dropout (--dropout) and the scenario's parameter dropout (--set dropout=); write network.dropout = [...] "
        "for the network's, params.dropout = [...] for the scenario's")
    # params.dropout replaces the file's [params] dropout (not "given both"); the sweep goes on to
    # check its points (refused here for the tiny data's 30 users, before any point ran)
    (tmp_path / "ok.toml").write_text('scenario = "personalfr"\n[params]\ndropout = 0.1\n[grid]\n'
                                      'params.dropout = [0.2, 0.5]\nnetwork.dropout = [0]\n')
    res = fedsim_cmd("sweep", "--config", "ok.toml", cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.strip() == (
        "error: clients = 100 (the default) is more than the 30 users of the data: each client holds at least one "
        "user (give clients <= 30, or 0 for one user per client) (all 2 points of the sweep to run; none was run)")
    assert not (tmp_path / "runs").exists()
