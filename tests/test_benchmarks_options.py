"""Benchmark options out of range are usage errors, not tracebacks after minutes of work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.parametrize("script, args, message", [
    ("fedrec_split.py", ["--repeats", "0"], "argument --repeats: must be at least 1, got 0"),  # StatisticsError
    ("fedrec_floor.py", ["--iterations", "0"], "argument --iterations: must be at least 1, got 0"),
    ("fedrec_split.py", ["--repeats", "x"], "argument --repeats: expected an integer, got 'x'"),
    ("data_loading.py", ["--runs", "0"], "argument --runs: must be at least 1, got 0"),  # NameError
])
def test_a_benchmark_refuses_a_count_below_one(script, args, message):
    res = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.strip().endswith(f"{script}: error: {message}"), res.stderr
