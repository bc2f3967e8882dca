"""Loading speed of the MovieLens loaders on generated files of the official formats and sizes.

Generates, in a temporary folder:

- ``ml-1m/ratings.dat``: 1,000,209 lines ``UserID::MovieID::Rating::Timestamp`` (~24 MB, like
  the real file: 6,040 users, ids up to 3,952, sorted by user);
- ``ml-20m/ratings.csv``: 20,000,263 rows ``userId,movieId,rating,timestamp`` with a header and
  half-star ratings (~530 MB, 138,493 users, ids up to 131,262, sorted by user then movie);

then times ``fedsim.data.load_movielens`` on each (the full loader: parsing, validation, dense
indexing, duplicate check): the median of ``--runs`` runs for ML-1M, one run for the 20M file.
Prints one JSON line with wall and CPU seconds (CPU time is the better figure when other jobs
share the machine; the 1-minute load average is printed too).  Targets: <= 2 s and <= 30 s wall.

    python benchmarks/data_loading.py            # full size, files in a temporary folder
    python benchmarks/data_loading.py --workdir /tmp/fedsim-bench   # keep the files for re-runs
    python benchmarks/data_loading.py --rows-20m 2000000 --runs 3   # quicker smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from fedsim.data import load_movielens

TARGET_1M_S = 2.0
TARGET_20M_S = 30.0


def _user_runs(rng, n_rows: int, n_users: int, min_per_user: int = 20) -> np.ndarray:
    min_per_user = min(min_per_user, n_rows // n_users)  # a small smoke-run file: fewer per user
    x = rng.lognormal(0.0, 1.1, n_users)
    extra = n_rows - n_users * min_per_user
    counts = min_per_user + np.floor(x / x.sum() * extra).astype(np.int64)
    counts[: n_rows - counts.sum()] += 1
    return np.repeat(np.arange(1, n_users + 1), counts)


def _write_lines(path: Path, cols: list[np.ndarray], fmt: str, header: str | None, chunk: int = 500_000) -> None:
    with open(path, "w", newline="\n") as fh:
        if header:
            fh.write(header + "\n")
        n = len(cols[0])
        for s in range(0, n, chunk):
            parts = [c[s : s + chunk].tolist() for c in cols]
            fh.write("".join(fmt % row for row in zip(*parts)))


def make_ml1m(folder: Path, n_rows: int = 1_000_209, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    users = _user_runs(rng, n_rows, max(1, min(6040, n_rows // 20)))  # 6,040 users at full size
    items = rng.integers(1, 3953, n_rows)
    ratings = rng.integers(1, 6, n_rows)
    ts = rng.integers(956_703_932, 1_046_454_590, n_rows)
    order = np.lexsort((items, users))
    users, items = users[order], items[order]
    # remove duplicated (user, item) pairs by nudging the item id
    key = users * 10_000 + items
    dup = np.concatenate(([False], key[1:] == key[:-1]))
    while dup.any():
        items[dup] = items[dup] % 3952 + 1
        order = np.lexsort((items, users))
        users, items = users[order], items[order]
        key = users * 10_000 + items
        dup = np.concatenate(([False], key[1:] == key[:-1]))
    d = folder / "ml-1m"
    d.mkdir(parents=True, exist_ok=True)
    _write_lines(d / "ratings.dat", [users, items, ratings, ts], "%d::%d::%d::%d\n", None)
    return d


def make_ml20m(folder: Path, n_rows: int = 20_000_263, seed: int = 1) -> Path:
    rng = np.random.default_rng(seed)
    n_users = max(1, int(round(138_493 * n_rows / 20_000_263)))
    users = _user_runs(rng, n_rows, n_users)
    # item ids: a skewed draw over 1..131262; unique per user via sorting + nudging
    items = np.minimum((rng.pareto(0.8, n_rows) * 400).astype(np.int64) + 1, 131_262)
    order = np.lexsort((items, users))
    users, items = users[order], items[order]
    for _ in range(50):
        key = users * 200_000 + items
        dup = np.concatenate(([False], key[1:] == key[:-1]))
        if not dup.any():
            break
        items[dup] = rng.integers(1, 131_263, int(dup.sum()))
        order = np.lexsort((items, users))
        users, items = users[order], items[order]
    else:  # pragma: no cover
        raise RuntimeError("could not make unique pairs")
    halves = rng.integers(1, 11, n_rows)
    ratings = np.array([f"{h / 2:.1f}" for h in range(11)])[halves]
    ts = rng.integers(789_652_009, 1_427_784_002, n_rows)
    d = folder / "ml-20m"
    d.mkdir(parents=True, exist_ok=True)
    _write_lines(d / "ratings.csv", [users, items, ratings, ts], "%d,%d,%s,%d\n", "userId,movieId,rating,timestamp")
    return d


def _cached(folder: Path, make, name: str) -> Path:
    """Generate into ``folder`` unless a previous run left a complete file there."""
    done = folder / ".complete"
    if not done.exists():
        make(folder)
        done.write_text("ok\n")
    return folder / name


def _time_load(folder: Path) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of this process, rows)."""
    c = time.process_time()
    t = time.perf_counter()
    r = load_movielens(folder)
    return time.perf_counter() - t, time.process_time() - c, len(r)


def _at_least_one(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=_at_least_one, default=5, help="runs for the ML-1M file (median reported)")
    ap.add_argument("--rows-1m", type=int, default=1_000_209)
    ap.add_argument("--rows-20m", type=int, default=20_000_263, help="0 skips the large file")
    ap.add_argument("--workdir", help="generate the files here (once) and keep them, instead of a temp folder")
    args = ap.parse_args(argv)
    out: dict = {
        "benchmark": "data_loading",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
    }
    with tempfile.TemporaryDirectory(prefix="fedsim-bench-") as tmp:
        root = Path(args.workdir) if args.workdir else Path(tmp)
        t = time.perf_counter()
        d1 = _cached(root / f"ml-1m-{args.rows_1m}", lambda d: make_ml1m(d, args.rows_1m), "ml-1m")
        gen1 = time.perf_counter() - t
        runs, cpus = [], []
        for _ in range(args.runs):
            dt, cpu, n = _time_load(d1)
            runs.append(dt)
            cpus.append(cpu)
        out["ml1m_dat"] = {
            "rows": n, "bytes": (d1 / "ratings.dat").stat().st_size, "runs_s": [round(x, 3) for x in runs],
            "median_s": round(statistics.median(runs), 3), "median_cpu_s": round(statistics.median(cpus), 3),
            "target_s": TARGET_1M_S, "generate_s": round(gen1, 1),
        }
        ok = statistics.median(runs) <= TARGET_1M_S
        if args.rows_20m:
            t = time.perf_counter()
            d2 = _cached(root / f"ml-20m-{args.rows_20m}", lambda d: make_ml20m(d, args.rows_20m), "ml-20m")
            gen2 = time.perf_counter() - t
            size = (d2 / "ratings.csv").stat().st_size
            dt, cpu, n = _time_load(d2)
            out["csv_20m"] = {"rows": n, "bytes": size, "load_s": round(dt, 2), "cpu_s": round(cpu, 2),
                              "target_s": TARGET_20M_S, "generate_s": round(gen2, 1)}
            ok = ok and dt <= TARGET_20M_S
        out["max_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # (KiB on Linux)
        out["load_average_1m"] = round(os.getloadavg()[0], 2)  # other work sharing the 2 cores
        out["ok"] = bool(ok)
    print(json.dumps(out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
