"""fedsim run, sweep and trace against a REAL full disk: each command runs in a subprocess inside a
private mount namespace (``unshare -m``), its output folder on a small tmpfs that nothing else
sees, of sizes measured from what the command writes so that the disk fills at different points
(before anything is written, in the middle of the ledger, while the tables, plots, report.md and
results.json are written, between two points of a sweep, while a sweep writes its own files).

Every size must end as the contract says: status 0 and complete, well-formed outputs, or a non-zero
status with one ``error:`` line naming the file and the folder, no traceback, and no folder that
claims what did not happen; a sweep stopped by the disk says in its sweep.json what happened, and
the same command on a bigger disk runs only the points missing. The tests of the same promises by
monkeypatching, and with a real file size limit (``RLIMIT_FSIZE``, which needs no root), are in
test_run_outputs.py, test_sweep_outcomes.py, test_sweep_keyed.py and test_trace_faults.py.

tmpfs counts space in pages (4 KiB): a file of 300 bytes takes one. Sizes below are in pages,
``size=4k`` a page; a tmpfs of size 0 has no limit, so "full from the start" is a page taken by a
filler file. Linux only, as root (or with the rights to unshare a mount namespace and mount): the
tests skip, saying why, where that is refused."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGE = 4096
BIG = 4096  # pages (16 MiB): room for everything
FEDSIM = [sys.executable, "-m", "fedsim"]
RUN = ["run", "--data", "tiny", "--set", "iterations=2", "--set", "d=4", "--quiet", "--out", "o"]  # quickstart
SWEEP = ["sweep", "quickstart", "--data", "tiny", "--set", "iterations=1", "--set", "d=4", "--grid", "rho=0,1",
         "--workers", "1", "--quiet", "--out", "sw"]
TRACE = ["trace", "demo", "--out", "t"]


def _namespace_refusal() -> str | None:
    """Why a private mount namespace with a tmpfs cannot be had here, or None."""
    if not sys.platform.startswith("linux"):
        return "needs Linux (unshare, tmpfs)"
    if shutil.which("unshare") is None:
        return "the unshare command is not installed"
    probe = Path(os.environ.get("TMPDIR", "/tmp")) / f"fedsim-tmpfs-probe-{os.getpid()}"
    probe.mkdir(exist_ok=True)
    try:
        r = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=4k tmpfs {shlex.quote(str(probe))}"],
                           capture_output=True, text=True, timeout=30)
    finally:
        probe.rmdir()
    if r.returncode != 0:
        return f"unshare -m / mount -t tmpfs refused here (needs root or CAP_SYS_ADMIN): {r.stderr.strip()[:200]}"
    return None


REFUSED = _namespace_refusal()
pytestmark = pytest.mark.skipif(REFUSED is not None, reason=f"no real full disk to test on: {REFUSED}")


def _pages(nbytes: int) -> int:
    return max(1, math.ceil(nbytes / PAGE))


def _on_tmpfs(tmp_path: Path, steps: list[tuple[int, int, list[str]]]) -> list[dict]:
    """Run each step ``(pages, filler_pages, fedsim_args)`` one after the other, in one private
    mount namespace, in the working folder of one tmpfs (its size set to ``pages`` before the
    step: remounted, so what the earlier steps wrote stays; ``filler_pages`` of it taken by a
    file ``.filler`` during the step). Returns per step its status, stdout, stderr and a copy of
    the tmpfs after it (``snap``, without the filler)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir(parents=True)
    lines = ["set -u", f"mount -t tmpfs -o size={steps[0][0] * 4}k tmpfs {shlex.quote(str(mnt))} || exit 99",
             f"cd {shlex.quote(str(mnt))}"]
    for i, (pages, filler, args) in enumerate(steps):
        base = shlex.quote(str(tmp_path / f"step{i}"))
        lines += [f"mount -o remount,size={pages * 4}k {shlex.quote(str(mnt))} || exit 98"]
        if filler:
            lines += [f"head -c {filler * PAGE} /dev/zero > .filler || exit 97"]
        lines += [f"{shlex.join([*FEDSIM, *args])} > {base}.out 2> {base}.err; echo $? > {base}.rc",
                  "rm -f .filler", f"mkdir {base}.snap && cp -a . {base}.snap/"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    r = subprocess.run(["unshare", "-m", "sh", "-c", "\n".join(lines)], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"the namespace script failed ({r.returncode}): {r.stderr}"
    out = []
    for i in range(len(steps)):
        base = tmp_path / f"step{i}"
        out.append({"rc": int(Path(f"{base}.rc").read_text()), "out": Path(f"{base}.out").read_text(),
                    "err": Path(f"{base}.err").read_text(), "snap": Path(f"{base}.snap")})
    return out


def _files(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` (relative path: bytes)."""
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_error_line(step: dict, what: str, file: str, folder: str) -> str:
    """Assert the step stopped (status 2) with one ``error:`` line for a full disk naming ``file``
    (its path ends so) and ``folder``, no traceback; returns the line."""
    assert step["rc"] == 2, step
    assert "Traceback" not in step["err"], step["err"]
    lines = step["err"].splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: the {what} stopped: No space left on device writing "), lines
    named = lines[0].removeprefix(f"error: the {what} stopped: No space left on device writing ").split("; ", 1)[0]
    assert named.endswith(file), (named, file)
    assert f" {folder}" in lines[0] or f"{folder}/" in lines[0], lines[0]
    return lines[0]


def _csv(path: Path) -> list[list[str]]:
    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))
    assert rows and rows[0] and all(len(r) == len(rows[0]) for r in rows), path
    return rows


def _check_finished_run(o: Path, ledger: bool) -> dict:
    """A finished run's folder as the docs promise it (cli.md, "What a run writes"), each file
    whole; returns results.json."""
    res = json.loads((o / "results.json").read_text(encoding="utf-8"))
    assert res["scenario"] == "quickstart" and res["finished"]
    for t in res["tables"]:
        assert len(_csv(o / f"{t}.csv")) > 1
    for p in res["plots"]:
        assert (o / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (o / p).stat().st_size > 1000
    report = (o / "report.md").read_text(encoding="utf-8")
    assert report.startswith("# ") and all(f"({t}.csv" in report or f"`{t}.csv`" in report for t in res["tables"])
    from fedsim.experiment import human_seconds

    assert (o / "run.log").read_text(encoding="utf-8").splitlines()[-1].endswith(
        f"finished in {human_seconds(res['wall_time_s'])}")
    if ledger:
        rows = _csv(o / "ledger.csv")
        assert rows[0][0] == "run" and len(rows) - 1 == res["ledger_totals"]["messages"] > 0
    else:
        assert not (o / "ledger.csv").exists()
    assert not [p for p in o.iterdir() if p.name.startswith(".")]  # (no lock, no temporary file left)
    return res


def test_fedsim_run_on_a_real_full_disk(tmp_path):
    table = []
    # measured: everything a run writes, with and without its ledger
    (big,) = _on_tmpfs(tmp_path / "m", [(BIG, 0, [*RUN, "--ledger"])])
    assert big["rc"] == 0 and big["err"] == "", big
    files = _files(big["snap"] / "o")
    _check_finished_run(big["snap"] / "o", ledger=True)
    with_ledger = sum(_pages(n) for n in files.values())
    without = with_ledger - _pages(files["ledger.csv"])
    assert _pages(files["cost_per_role.png"]) > 1  # (the size below leaves it too little room)
    assert without < with_ledger // 2  # (the ledger is most of it: the sizes below fill it in different places)
    cases = [  # (pages, filler, --ledger, the file being written when the disk is full; None: finishes)
        (1, 1, True, "run.log"),  # full as the run starts: its log's first line
        (4, 0, True, ".ledgers/00001-network.csv"),  # a network's ledger, written as the network ends
        (with_ledger, 0, True, "/ledger.csv"),  # the networks' ledgers merged: parts and ledger.csv side by side
        (without - 3, 0, False, "/cost_per_role.png"),  # the tables written, the plot not
        (without - 2, 0, False, "/report.md"),
        (without - 1, 0, False, "/results.json"),  # the last file, before the folder is renamed into place
        (without, 0, False, None),  # exactly enough
    ]
    steps = _on_tmpfs(tmp_path / "c", [(p, f, [*RUN, *(["--ledger"] if led else [])]) for p, f, led, _ in cases])
    table.append(("fedsim run quickstart --ledger", BIG, "0, finished"))
    for (pages, filler, led, file), step in zip(cases, steps):
        left = _files(step["snap"])
        if file is None:
            assert step["rc"] == 0 and step["err"] == "", step
            assert step["out"].startswith("results in o/: ")
            _check_finished_run(step["snap"] / "o", ledger=led)
            outcome = "0, finished"
        else:
            line = _one_error_line(step, "run", file, "its output folder o was not written")
            assert step["out"] == ""
            assert left == {}, left  # no folder, no temporary folder: nothing at all
            outcome = f"2, {line.removeprefix('error: ')[:150]}"
        table.append((f"fedsim run quickstart{' --ledger' if led else ''}", pages - filler, outcome))
    _show(table)


def _sweep_json(sw: Path) -> dict:
    doc = json.loads((sw / "sweep.json").read_text(encoding="utf-8"))
    assert doc["scenario"] == "quickstart" and len(doc["points"]) == 2
    return doc


def _check_sweep_folder(sw: Path, finished: bool) -> dict:
    """What sweep.json says against the point folders: a point said done has a finished run's
    folder, one said failed or not run has none; report.md says Finished. only when sweep.json
    says finished. Returns sweep.json."""
    doc = _sweep_json(sw)
    for pt in doc["points"]:
        folder = sw / f"rho={pt['point']['rho']}"
        if pt["status"] in ("done", "done before"):
            _check_finished_run(folder, ledger=False)
        else:
            assert not (folder / "results.json").exists(), pt
    report = (sw / "report.md").read_text(encoding="utf-8") if (sw / "report.md").exists() else ""
    assert ("Finished." in report) == (doc["state"] == "finished") == finished, (doc["state"], report[:300])
    if finished:
        for t in ("accuracy", "communication"):
            assert len(_csv(sw / f"combined_{t}.csv")) == 1 + 2 * (len(_csv(sw / "rho=0.0" / f"{t}.csv")) - 1)
        plots = sorted(p.name for p in sw.glob("sweep_*.png"))
        assert plots and all(f"({p})" in report for p in plots)
        assert not [p for p in sw.iterdir() if p.name.startswith(".") and p.name != ".sweep.lock"]
    return doc


def test_fedsim_sweep_on_a_real_full_disk_says_what_happened_and_resumes(tmp_path):
    table = []
    (big,) = _on_tmpfs(tmp_path / "m", [(BIG, 0, SWEEP)])
    assert big["rc"] == 0 and big["err"] == "", big
    assert big["out"].startswith("sweep: 2 points, 2 run, 0 already done, 0 failed; results in sw/")
    _check_sweep_folder(big["snap"] / "sw", finished=True)
    files = _files(big["snap"] / "sw")
    point = sum(_pages(n) for f, n in files.items() if f.startswith("rho=0.0/"))
    total = sum(_pages(n) for n in files.values())
    table.append(("fedsim sweep quickstart rho=0,1", BIG, "0, finished: 2 run"))

    # full from the start: nothing written (but the sweep's lock, empty), nothing claimed
    (full,) = _on_tmpfs(tmp_path / "f", [(1, 1, SWEEP)])
    line = _one_error_line(full, "sweep", "sw/.sweep.lock", "no point was run, and sw/sweep.json was not written")
    assert _files(full["snap"]) == {"sw/.sweep.lock": 0}
    table.append(("fedsim sweep quickstart rho=0,1", 0, f"2, {line.removeprefix('error: ')[:150]}"))

    # room for the sweep's start, not for a point's run, nor its error.txt: each point fails, the
    # sweep says so and ends (status 1, as with failed points); its sweep.json says which and why
    (none,) = _on_tmpfs(tmp_path / "n", [(6, 0, SWEEP)])
    assert none["rc"] == 1 and "Traceback" not in none["err"], none
    assert none["out"].startswith("sweep: 2 points, 0 run, 0 already done, 2 failed (above; their error.txt could "
                                  "not be written); results in sw/"), none["out"]
    lines = none["err"].splitlines()
    assert len(lines) == 2 and all(
        line.startswith(f"failed rho={r}: UsageError: the run stopped: No space left on device writing sw/.rho={r}.partial-")
        and line.endswith(f"(its error.txt could not be written: No space left on device writing sw/rho={r}/point.json)")
        for line, r in zip(lines, (0.0, 1.0))), lines
    doc = _sweep_json(none["snap"] / "sw")
    assert (doc["state"], [(p["status"], p["unwritten"]) for p in doc["points"]]) == (
        "finished", [("failed", f"No space left on device writing sw/rho={r}/point.json") for r in (0.0, 1.0)])
    assert "**Incomplete: 2 point(s) failed**" in (none["snap"] / "sw" / "report.md").read_text(encoding="utf-8")
    assert not list((none["snap"] / "sw").glob("rho=*/*"))  # nothing in the point folders (run again on resume)
    table.append(("fedsim sweep quickstart rho=0,1", 6, "1, " + none["out"][:150]))

    # room for the sweep's start and one point, not two: the second fails (its run said so), the
    # sweep's own files then fill the disk; on a bigger disk the same command runs the failed point only
    mid = 6 + point + point // 2
    # room for both points, not for the sweep's files after them
    end = total
    for pages, first in ((mid, ("done", "failed")), (end, ("done", "done"))):
        stop, again = _on_tmpfs(tmp_path / f"r{pages}", [(pages, 0, SWEEP), (BIG, 0, SWEEP)])
        assert "Traceback" not in stop["err"], stop["err"]
        *failed, last = stop["err"].splitlines()
        said = [f"failed rho={r}: UsageError: the run stopped: No space left on device writing " for r, s in
                zip((0.0, 1.0), first) if s == "failed"]
        assert [f[:len(s)] for f, s in zip(failed, said)] == said and len(failed) == len(said), stop["err"]
        assert stop["rc"] == 2 and last.startswith("error: the sweep stopped: No space left on device writing sw/"), last
        done, fails = first.count("done"), first.count("failed")
        assert last.endswith(f"; sw/sweep.json says interrupted ({done} done{f', {fails} failed' if fails else ''}) "
                             "(free some space, then run the same command again: it resumes)"), last
        doc = _check_sweep_folder(stop["snap"] / "sw", finished=False)
        assert (doc["state"], tuple(p["status"] for p in doc["points"])) == ("interrupted", first)
        kept = (stop["snap"] / "sw" / "rho=0.0" / "results.json").read_bytes()
        table.append(("fedsim sweep quickstart rho=0,1", pages, f"2, {last.removeprefix('error: ')[:150]}"))

        assert again["rc"] == 0 and again["err"] == "", again
        assert again["out"].startswith(f"sweep: 2 points, {fails} run{f' ({fails} of them again)' if fails else ''}, "
                                       f"{done} already done, 0 failed; results in sw/"), again["out"]
        doc = _check_sweep_folder(again["snap"] / "sw", finished=True)
        assert [p["status"] for p in doc["points"]] == ["done before" if s == "done" else "done" for s in first]
        assert (again["snap"] / "sw" / "rho=0.0" / "results.json").read_bytes() == kept  # not run again
        table.append(("  same command, then", BIG, f"0, finished: {fails} run, {done} already done"))
    _show(table)


def test_fedsim_trace_on_a_real_full_disk(tmp_path):
    table = []
    (big,) = _on_tmpfs(tmp_path / "m", [(BIG, 0, TRACE)])
    assert big["rc"] == 0 and big["err"] == "", big
    files = _files(big["snap"] / "t")
    assert sorted(files) == ["sequence.mmd", "steps.log", "timeline.png", "timeline.svg", "trace.html"]
    total = sum(_pages(n) for n in files.values())
    cases = [(1, 1, "trace.html"),  # full from the start: its first file
             (total - _pages(files["timeline.png"]) - 1, 0, "steps.log"),  # the last text view
             (total - 1, 0, "timeline.png"),  # the last file, before the folder is renamed into place
             (total, 0, None)]
    steps = _on_tmpfs(tmp_path / "c", [(p, f, TRACE) for p, f, _ in cases])
    table.append(("fedsim trace demo", BIG, "0, finished"))
    for (pages, filler, file), step in zip(cases, steps):
        if file is None:
            assert step["rc"] == 0 and step["err"] == "", step
            t = step["snap"] / "t"
            assert _files(t).keys() == files.keys()
            html = (t / "trace.html").read_text(encoding="utf-8")
            assert html.lstrip().lower().startswith("<!doctype html>") and html.rstrip().endswith("</html>")
            assert (t / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            assert (t / "timeline.svg").read_text(encoding="utf-8").rstrip().endswith("</svg>")
            assert (t / "steps.log").read_text(encoding="utf-8") == (big["snap"] / "t" / "steps.log").read_text()
            outcome = "0, finished"
        else:
            line = _one_error_line(step, "trace", file, "its output folder t was not written")
            assert step["out"] == "" and _files(step["snap"]) == {}
            outcome = f"2, {line.removeprefix('error: ')[:150]}"
        table.append(("fedsim trace demo", pages - filler, outcome))
    _show(table)


def _show(table: list[tuple[str, int, str]]) -> None:
    """Print the sizes tried and how each ended (``pytest -s`` shows them)."""
    for cmd, pages, outcome in table:
        print(f"{cmd:<36} {pages:>5} pages ({pages * 4} KiB free)  {outcome}")
