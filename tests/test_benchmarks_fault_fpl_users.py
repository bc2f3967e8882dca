"""benchmarks/fault_fpl_users.py: its table says what each faulty run scores and what the fault-free
model scores on the same users, consistently with the runs' own metric rows."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_fault_fpl_users_prints_one_consistent_row_per_fault():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fault_fpl_users.py"), "--dropouts", "0.3",
                          "--loss", "0"], capture_output=True, text=True, timeout=300, cwd=ROOT, check=True).stdout
    clean = re.search(r"fault-free: P@10 ([0-9.]+) over (\d+) users", out)
    n = int(clean.group(2))
    rows = [line for line in out.splitlines() if re.match(r"\| 0 \| 0\.3 \|", line)]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    users, faulty, same = int(cells[2]), float(cells[3]), float(cells[4])
    lost = re.match(r"([0-9.]+) \((\d+) users\)", cells[5])
    # every user with test items is either still there or dropped out, and the fault-free model's
    # P@10 over all of them is the users-weighted mean of its two parts
    assert 0 < users < n and users + int(lost.group(2)) == n
    whole = (same * users + float(lost.group(1)) * int(lost.group(2))) / n
    assert abs(whole - float(clean.group(1))) < 1e-3  # (the table's figures have 4 decimals)
    assert 0 < faulty < 1
