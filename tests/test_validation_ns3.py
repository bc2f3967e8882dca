"""ns-3 ground truth: one small pattern in a subprocess (importing ns-3 costs ~8 s and 600 MB),
checked against bounds derived by hand. Skipped when the ns3 package is not installed."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from validation import patterns as P  # noqa: E402
from validation import results  # noqa: E402

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ns") is None or importlib.util.find_spec("ns3") is None,
    reason="ns-3 is not installed (pip install '.[validation]', i.e. the ns3 wheel)")

MSS = 1448
FRAME = MSS + 32 + 20 + 2  # payload + TCP header with timestamps + IPv4 + PPP: 1502 bytes on the link
R = 10e6 / 8  # 10 Mbit/s in bytes/s
D = 0.020  # the client's one-way latency; the server's is 0, so one way = 20 ms, RTT = 40 ms
S = 1_000_000


def _pattern():
    return {
        "name": "test/1MB-10Mbit-20ms",
        "nodes": {"client/0": {"up": R, "down": R, "latency": D}, "server": {"up": R, "down": R, "latency": 0.0}},
        "messages": [
            {"id": 0, "src": "client/0", "dst": "server", "bytes": S, "start": 0.0, "after": [], "delay": 0.0},
            # the answer: 10 kB back, 0.1 s after the upload completed
            {"id": 1, "src": "server", "dst": "client/0", "bytes": 10_000, "start": 0.0, "after": [0], "delay": 0.1},
        ],
    }


def test_one_megabyte_over_10_mbit_and_20_ms(tmp_path):
    pat = _pattern()
    (tmp_path / "p.json").write_text(json.dumps(pat))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-m", "validation.ns3_star", "--json", str(tmp_path / "p.json"),
                        "-o", str(tmp_path / "out.json")], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = results.load_doc(tmp_path / "out.json")
    assert doc["engine"] == "ns-3" and doc["settings"]["segment_size"] == MSS
    res = doc["patterns"][0]
    assert res["hash"] == P.pattern_hash(pat) and res["complete"]
    assert res["queue_drops"] == 0 and res["retransmissions"] == 0
    up, answer = res["messages"]

    # First byte: SYN (20 ms), SYN-ACK (20 ms), then the first full segment is serialised on the
    # client's uplink, propagates 20 ms and is serialised again on the server's downlink (store and
    # forward at the router): 3 x 20 ms + 2 x 1502 B / R, plus the few small handshake packets
    # (< 100 B each at 10 Mbit/s: < 0.1 ms apiece).
    first = 3 * D + 2 * FRAME / R
    assert first <= up["first_byte"] <= first + 0.001

    # Completion, lower bound: the handshake (2 x 20 ms), every byte through the uplink (S / R,
    # and exactly S / 1448 segments of 1502 bytes on the wire: S x 1502 / 1448 / R), and the last
    # byte's 20 ms of propagation: 3 x RTT/2 + S x 1502/1448 / R = 0.060 + 0.8298 s.
    lower = 3 * D + S * FRAME / MSS / R
    assert up["completion"] >= lower
    assert up["completion"] >= 3 * D + S / R  # the cruder bound of the issue: size/rate + 3 RTT/2
    # Upper bound: slow start from 10 segments must reach the bandwidth-delay product
    # (R x 40 ms = 50 kB = 34.5 segments): 2 doublings, each round leaving the link idle for less
    # than an RTT; allow 2 more RTTs for delayed ACKs (every 2nd segment, 40 ms timer) and HyStart
    # leaving slow start early: 4 RTTs = 0.16 s.
    assert up["completion"] <= lower + 4 * 2 * D

    # The dependent message starts exactly 0.1 s after the upload completed (sink Rx trace).
    assert answer["start"] == pytest.approx(up["completion"] + 0.1, abs=1e-9)
    # 10 kB back: handshake + 7 segments within the initial window: 3 one-way trips + 7 frames.
    assert answer["duration"] == pytest.approx(3 * D + 8 * FRAME / R, abs=0.003)
    assert res["round"] == answer["completion"]

    # fedsim's models on the same pattern (validation/fedsim_run.py): the flow model with TCP's
    # start-up comes within 2 % of ns-3 on both messages and the round; store-and-forward FIFO,
    # which knows no handshake, window or headers, is off by more than 5 %
    from validation.fedsim_run import run_pattern

    tcp = run_pattern(pat, "tcp")
    fifo = run_pattern(pat, "fifo")
    for got, want in zip(tcp["messages"], res["messages"]):
        assert got["completion"] == pytest.approx(want["completion"], rel=0.02)
    assert tcp["round"] == pytest.approx(res["round"], rel=0.02)
    assert abs(fifo["round"] - res["round"]) / res["round"] > 0.05
