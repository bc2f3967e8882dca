"""benchmarks/scale.py refuses what it cannot measure as asked: more clients than the preset has
users (the child ran the preset's users under the requested count's label: "100" in the table for
a run of 30 clients), no client, or a single iteration (its per-client figures are of the later
iterations; with one, iteration 0 and its start-up stood in for them). A small run works."""

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO


def _scale(tmp_path, *args):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "scale.py"), "--preset", "tiny",
                           "--cache", str(tmp_path / "cache"), *args], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)


@pytest.mark.parametrize("clients, message", [("100", "100 clients, but tiny-s0-id_range has 30 users"),
                                              ("10,0", "0 clients, but tiny-s0-id_range has 30 users"),
                                              ("ten", "give client counts separated by commas")])
def test_client_counts_outside_the_preset_are_refused(tmp_path, clients, message):
    res = _scale(tmp_path, "--clients", clients, "--iterations", "2")
    assert res.returncode != 0 and message in res.stderr
    assert "| tiny |" not in res.stdout


def test_one_iteration_is_refused(tmp_path):
    res = _scale(tmp_path, "--clients", "10", "--iterations", "1")
    assert res.returncode != 0 and "--iterations must be at least 2" in res.stderr


def test_a_small_run_reports_the_clients_it_ran(tmp_path):
    res = _scale(tmp_path, "--clients", "10,30", "--iterations", "2")
    assert res.returncode == 0, res.stderr
    runs = json.loads(res.stdout.strip().splitlines()[-1])["runs"]
    assert [r["clients"] for r in runs] == [10, 30]
    assert all(len(r["iteration_s"]) == 2 and r["ledger_rows"] == r["clients"] * 5 for r in runs)
