"""benchmarks/link_models.py warms every link model up before timing: its first run in a process
(compiling the clients' kernels, first-touch memory: 0.99 s against 0.003 s on ``tiny``) was timed
as one of ``fifo``'s runs, the first model of the first repeat, inflating fifo and deflating the
ratios to it."""

import pytest
from conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("link_models")


def test_the_first_run_of_each_model_is_not_timed(bench):
    calls = []

    def fake(data, model, profile, iterations):
        calls.append(model)
        return (100.0 if len(calls) == 1 else 1.0), 2.0  # the process's first run is slow

    wall, sim = bench.measure(None, "wan", 1, 2, run=fake)
    assert calls == ["fifo", "fair", "tcp"] * 3
    assert wall == {"fifo": [1.0, 1.0], "fair": [1.0, 1.0], "tcp": [1.0, 1.0]}
    assert sim == {"fifo": 2.0, "fair": 2.0, "tcp": 2.0}


def test_a_small_run_reports_ratios(bench, capsys):
    import json

    bench.main(["--data", "tiny", "--repeats", "1"])
    fig = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert fig["clients"] == 30 and fig["fair_over_fifo"] > 0.1 and fig["tcp_over_fifo"] > 0.1


def test_no_repeat_is_refused(bench, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--data", "tiny", "--repeats", "0"])
    assert "--repeats and --iterations must be at least 1" in capsys.readouterr().err
