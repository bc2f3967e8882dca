"""fedsim compare: the same protocol run on the simulator and over TCP, side by side."""

from __future__ import annotations

import csv
import re
import subprocess
import sys

import pytest


def _csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("protocol", ["fedrec", "fpl"])
def test_compare_reports_equal_bytes_identical_parameters_and_round_times(protocol, tmp_path):
    out = tmp_path / "cmp"
    res = subprocess.run([sys.executable, "-m", "fedsim", "compare", protocol, "--data", "tiny", "--set",
                          f"{'T' if protocol == 'fedrec' else 'rounds'}=3", "--processes", "2", "--quiet",
                          "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    summary = _csv(out / "summary.csv")
    assert [r["network"].split(" ")[0] for r in summary] == ["sim", "tcp"]
    assert all(r["parameters_bit_identical"] == "True" for r in summary)
    payload = _csv(out / "payload_bytes.csv")
    assert payload and all(r["equal"] == "True" for r in payload)
    assert all(int(r["payload_bytes_sim"]) == int(r["payload_bytes_tcp"]) > 0 for r in payload)
    # copy by copy (payload bytes: TCP's frame headers, 25 bytes a copy, taken off its wire bytes)
    sent = sum(int(r["messages"]) for r in payload)
    assert (f"; the {sent} copies sent (0 of them lost) are the same messages on both networks (sender, receiver, "
            "kind, round, payload bytes, lost or not).") in (out / "report.md").read_text()
    times = _csv(out / "round_times.csv")
    assert [int(r["round"]) for r in times] == [0, 1, 2]
    assert all(float(r["simulated_s"]) > 0 and float(r["measured_tcp_s"]) > 0 for r in times)
    # (a mutant dividing the simulated by the measured time passed)
    assert all(float(r["measured_over_simulated"]) == pytest.approx(float(r["measured_tcp_s"]) / float(r["simulated_s"]))
               for r in times)


def test_compare_refuses_a_scenario(tmp_path):
    res = subprocess.run([sys.executable, "-m", "fedsim", "compare", "quickstart", "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "takes a registered protocol" in res.stderr
    assert not (tmp_path / "o").exists()


def test_compare_refuses_a_transport_from_the_config_file_as_from_the_command_line(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[network]\ntransport = "tcp"\n')
    for extra in (("--transport", "tcp"), ("--config", str(cfg))):
        res = subprocess.run([sys.executable, "-m", "fedsim", "compare", "demo", "--against", "asyncio", *extra,
                              "--set", "rounds=1", "--quiet", "--out", str(tmp_path / "o")],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 2 and "runs the simulator itself" in res.stderr, res.stderr
        assert not (tmp_path / "o").exists()
    assert "c.toml: line 2: [network] transport" in res.stderr


def test_the_protocol_runs_held_out_split_has_a_stream_of_its_own():
    # it was default_rng(seed): under the default --seed 0 the very stream that generated a
    # synthetic preset (at seed 0) chose the held-out ratings
    from types import SimpleNamespace

    import numpy as np

    from fedsim.data import generate, per_user_random
    from fedsim.experiment.protocol_run import split_data
    from fedsim.protocols import REGISTRY
    from fedsim.seeding import node_rng

    data = generate("tiny")
    ctx = SimpleNamespace(seed=0, config={"test_frac": 0.2}, load_data=lambda **kw: data)
    train, test = split_data(ctx, REGISTRY["fedrec"])
    want = per_user_random(data, 0.2, seed=node_rng(0, "split"))[1]
    old = per_user_random(data, 0.2, seed=0)[1]
    key = lambda r: set(zip(r.users.tolist(), r.items.tolist()))  # noqa: E731
    assert key(test) == key(want) != key(old)
    assert len(train) + len(test) == len(data)
    assert not np.shares_memory(train.users, test.users)


def test_simulated_time_counts_the_simulator_only_and_the_real_run_is_measured_time(tmp_path):
    # results.json's simulated_time_s summed both networks' clocks: the simulator's seconds and
    # the asyncio run's real ones (the report said "simulated time 20.5 ms" for a 9.46 ms
    # simulation beside an 11 ms real run)
    import json

    out = tmp_path / "cmp"
    res = subprocess.run([sys.executable, "-m", "fedsim", "compare", "fedrec", "--against", "asyncio", "--data",
                          "tiny", "--set", "T=2", "--quiet", "--out", str(out)], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    sim, real = _csv(out / "summary.csv")
    results = json.loads((out / "results.json").read_text())
    assert results["simulated_time_s"] == pytest.approx(float(sim["run_duration_s"]), rel=1e-6)
    assert results["measured_time_s"] == pytest.approx(float(real["run_duration_s"]), rel=1e-6)
    assert results["measured_time_s"] > 0
    assert "measured time on real transports" in (out / "report.md").read_text()


def test_a_failed_comparison_says_what_differs_in_its_message(tmp_path, monkeypatch):
    # the run fails and leaves no folder: the message said "see the report", which was not written
    from fedsim.experiment import ScenarioError, run_scenario
    from fedsim.experiment import compare as compare_mod

    mod = compare_mod.compare_scenario("demo", "asyncio")
    monkeypatch.setattr(compare_mod, "same_bits", lambda a, b: False)
    with pytest.raises(ScenarioError) as err:
        run_scenario(mod, out=tmp_path / "o", overrides={"rounds": 1, "clients": 2}, quiet=True)
    assert str(err.value) == "demo: the asyncio run differs from the simulator's: parameters w differ"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.filterwarnings("error::RuntimeWarning")  # the runs are made to diverge, silently (it ignored them)
def test_a_diverged_run_compares_equal_and_says_it_diverged(tmp_path):
    # both runs diverge alike, to the same NaN bits: np.array_equal called them different (NaN !=
    # NaN) and the comparison failed, and evaluating the diverged model was a traceback
    from fedsim.experiment import run_scenario
    from fedsim.experiment import compare as compare_mod

    mod = compare_mod.compare_scenario("fedrec", "asyncio")
    run_scenario(mod, out=tmp_path / "o", data="tiny", overrides={"T": 3, "lr": 1e6, "model": "PMF(B)"},
                       quiet=True)
    rows = _csv(tmp_path / "o" / "summary.csv")
    assert [r["parameters_bit_identical"] for r in rows] == ["True", "True"]
    assert rows[0]["diverged_at"] == rows[1]["diverged_at"] == "3"  # (FedRec stops after the iteration)
    assert all(r["test_error"] == "DivergenceError: PMF(B): diverged at iteration 3: non-finite parameters"
               for r in rows)
    # the report said so only through that column: no note, no caveat (a sweep saw a clean run)
    import json

    assert json.loads((tmp_path / "o" / "results.json").read_text())["caveats"] == ["diverged"]
    assert ("**Diverged.** The sim run's model diverged at round 3 of 3, where it stopped; the asyncio run's model "
            "diverged at round 3 of 3, where it stopped (its parameters, or the scores they give, were found not "
            "finite): the final figures are not those of a trained model.") in (tmp_path / "o" / "report.md").read_text()


def test_a_comparison_that_fails_says_which_run_diverged(tmp_path, monkeypatch):
    import warnings

    from fedsim.experiment import ScenarioError, run_scenario
    from fedsim.experiment import compare as compare_mod

    mod = compare_mod.compare_scenario("demo", "asyncio")
    monkeypatch.setattr(compare_mod, "same_bits", lambda a, b: False)
    with pytest.raises(ScenarioError) as err, warnings.catch_warnings():
        warnings.simplefilter("error")
        run_scenario(mod, out=tmp_path / "o", overrides={"rounds": 3, "clients": 2, "lr": 1e300}, quiet=True)
    assert str(err.value) == ("demo: the asyncio run differs from the simulator's: parameters w differ; the sim run's "
                              "model diverged at round 2 of 3, where it stopped; the asyncio run's model diverged at "
                              "round 2 of 3, where it stopped")  # 1e300 steps: finite once, not twice


def test_a_failed_comparison_names_both_dtypes_shapes_or_the_first_differing_value(tmp_path, monkeypatch):
    # the message said "parameters w differ" alone: float32 on one side and float64 on the other
    # read as other numbers. It now names what differs, with both sides.
    import numpy as np

    from fedsim.experiment import ScenarioError, run_scenario
    from fedsim.experiment import compare as compare_mod

    outcome = compare_mod._outcome

    def float32_on_asyncio(ctx, spec, label, *args):
        out = outcome(ctx, spec, label, *args)
        if label != "sim":
            out["params"] = {k: np.asarray(v, dtype=np.float32) for k, v in out["params"].items()}
        return out

    monkeypatch.setattr(compare_mod, "_outcome", float32_on_asyncio)
    mod = compare_mod.compare_scenario("demo", "asyncio")
    with pytest.raises(ScenarioError) as err:
        run_scenario(mod, out=tmp_path / "o", overrides={"rounds": 1, "clients": 2}, quiet=True)
    assert str(err.value) == ("demo: the asyncio run differs from the simulator's: parameters w differ (w: dtype "
                              "float64 on the simulator, float32 on asyncio)")
    assert list(tmp_path.iterdir()) == []

    a = np.arange(6.0).reshape(2, 3)
    b = a.copy()
    b[1, 2], b[0, 1] = -1.5, 0.5
    assert compare_mod.param_difference("w", a, b, "the simulator", "tcp") == (
        "w: 2 of 6 values differ (dtype float64, shape (2, 3)); the first at [0, 1]: 1.0 on the simulator, 0.5 on tcp")
    assert compare_mod.param_difference("w", a, a.T, "the simulator", "tcp") == (
        "w: shape (2, 3) on the simulator, (3, 2) on tcp")
    assert compare_mod.param_difference("w", a, a.T.astype(np.int32), "the simulator", "tcp") == (
        "w: dtype float64 on the simulator, int32 on tcp; shape (2, 3) on the simulator, (3, 2) on tcp")
    assert compare_mod.param_difference("b", None, a, "the simulator", "tcp") == "b only on tcp"
    assert compare_mod.param_difference("b", a, None, "the simulator", "tcp") == "b only on the simulator"
    assert compare_mod.param_difference("z", np.float64(0.0), np.float64(-0.0), "the simulator", "tcp") == (
        "z: 1 of 1 values differ (dtype float64, shape ()); the first: 0.0 on the simulator, -0.0 on tcp")
    assert compare_mod.param_difference("w", a, a.copy()) is None


def test_same_bits_is_bit_identity():
    import numpy as np

    from fedsim.experiment.compare import same_bits

    nan = np.array([np.nan, 1.0])
    assert same_bits(nan, nan.copy()) and not np.array_equal(nan, nan.copy())
    assert not same_bits(np.array([0.0]), np.array([-0.0]))  # equal numbers, other bits
    assert not same_bits(np.zeros(2, np.float32), np.zeros(2, np.float64))
    assert not same_bits(np.zeros((2, 1)), np.zeros(2))


def test_compare_runs_both_transports_with_the_same_faults(tmp_path):
    # the real transport was built without --loss and --dropout: every such compare reported that
    # the parameters differ (the simulator's run lost messages, the other did not). Loss draws are
    # keyed by message and a dropout window of 0,0 drops the same nodes from the start: the same bits
    # (given a deadline the online clients' gradients make: 1 s of real time on asyncio, which
    # each round with a lost gradient waits out; at 0.05 s a process held back 0.3 s just after
    # the server began a round's gather let the deadline pass before the clients sent: w differed)
    out = tmp_path / "cmp"
    res = subprocess.run([sys.executable, "-m", "fedsim", "compare", "demo", "--against", "asyncio", "--loss", "0.3",
                          "--dropout", "0.3", "--set", "deadline=1", "--set", "rounds=4", "--quiet", "--out",
                          str(out)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    summary = _csv(out / "summary.csv")
    assert summary[0]["network"] == "sim (lan, loss 0.3, 30% dropout in [0, 0] s)"
    assert [r["parameters_bit_identical"] for r in summary] == ["True", "True"]
    assert summary[0]["final_weight_error"] == summary[1]["final_weight_error"]
    payload = {r["kind"]: r for r in _csv(out / "payload_bytes.csv")}
    # 4 rounds x 8 clients: some uploads were lost or never made (clients offline from the start)
    assert int(payload["gradient"]["messages"]) < 32 and payload["gradient"]["equal"] == "True"
    # copy by copy, the lost ones included (lost alike: the loss draws are keyed by message, and
    # a node dropped from the start costs the same copies on both); ledger_totals adds both runs'
    import json

    totals = json.loads((out / "results.json").read_text())["ledger_totals"]
    said = re.search(r"the (\d+) copies sent \((\d+) of them lost\) are the same messages on both networks "
                     r"\(sender, receiver, kind, round, payload bytes, lost or not\)\.", (out / "report.md").read_text())
    assert said, (out / "report.md").read_text()
    sent, lost = int(said[1]), int(said[2])
    assert sent == sum(int(r["messages"]) for r in payload.values()) == totals["messages"] / 2
    assert 0 < lost == totals["lost_messages"] / 2


def test_a_failed_comparison_with_dropout_in_a_window_says_why_it_may_differ(tmp_path, monkeypatch):
    from fedsim.experiment import ScenarioError, run_scenario
    from fedsim.experiment import compare as compare_mod
    from fedsim.kernel import NetSpec

    mod = compare_mod.compare_scenario("demo", "asyncio")
    monkeypatch.setattr(compare_mod, "same_bits", lambda a, b: False)
    with pytest.raises(ScenarioError) as err:
        run_scenario(mod, out=tmp_path / "o", overrides={"rounds": 1, "clients": 2, "deadline": 0.05}, quiet=True,
                     net=NetSpec(profile="lan", dropout=0.5, window=(0.0, 5.0)))
    assert str(err.value) == (
        "demo: the asyncio run differs from the simulator's: parameters w differ; with dropout at times in "
        "[0.0, 5.0] s, a node drops out at a real instant on asyncio and at a simulated one on the simulator, so "
        "the messages it costs can differ (--dropout-window 0,0 drops the same nodes from the start on both)")


def test_a_comparison_of_runs_that_evaluated_nobody_says_so(tmp_path):
    # every client dropped out: both runs' test_error said "no user evaluated", and the report gave
    # only that column, without the Not evaluated note fedsim run writes
    out = tmp_path / "cmp"
    res = subprocess.run([sys.executable, "-m", "fedsim", "compare", "fedrec", "--against", "asyncio", "--data", "tiny",
                          "--dropout", "1.0", "--set", "deadline=0.05", "--set", "T=1", "--quiet", "--out", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    report = (out / "report.md").read_text()
    assert ("**Not evaluated.** No user was evaluated in the test evaluation of the final model of sim (lan, 100% "
            "dropout in [0, 0] s) and of asyncio: all 30 users with test ratings dropped out; these are not "
            "scores.") in report
    assert "unevaluated" in (out / "results.json").read_text()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sets RLIMIT_NOFILE, forks TCP workers")
def test_compare_refuses_an_open_file_limit_too_low_for_tcp_before_the_simulator_runs(tmp_path):
    # the refusal (TcpNetwork.check_descriptors) came from the TCP run, after the simulator's had
    # run to its end: its progress lines ("... 1/2") came first
    import resource

    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (40, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    res = subprocess.run([sys.executable, "-m", "fedsim", "compare", "fedrec", "--data", "tiny", "--set", "T=2",
                          "--processes", "20", "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=120, preexec_fn=low_limit)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, lines  # the error alone: no progress line, no simulator run
    assert lines[0].startswith("error: TcpNetwork with 20 worker processes needs ")
    assert "above the open-file limit ulimit -n = 40 " in lines[0] and "or use fewer processes" in lines[0]
    assert not (tmp_path / "o").exists()


def test_compare_refuses_a_tcp_run_that_needs_more_memory_than_is_available_before_the_simulator_runs(
        tmp_path, monkeypatch):
    # TcpNetwork.check_memory, patched figures: 4 workers of 1 GB each where 3 GB are available
    from fedsim.experiment import run_scenario
    from fedsim.experiment import compare as compare_mod
    from fedsim.kernel import NetworkConfigError, SimNetwork, tcp

    monkeypatch.setattr(tcp, "BASELINE_BYTES", 10**9)
    monkeypatch.setattr(tcp, "_mem_available", lambda: 3 * 10**9)
    ran = []
    monkeypatch.setattr(SimNetwork, "run", lambda self, *a, **k: ran.append(self))
    mod = compare_mod.compare_scenario("fedrec", "tcp", processes=4)
    with pytest.raises(NetworkConfigError) as err:
        run_scenario(mod, data="tiny", out=tmp_path / "o", overrides={"T": 2}, quiet=True)
    assert str(err.value).startswith("TcpNetwork with 4 worker processes needs at least 4 GB of memory ")
    assert "above the 3 GB available" in str(err.value) and str(err.value).endswith("use fewer processes")
    assert ran == [] and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("transport", ["asyncio", "tcp"])
def test_compare_lets_the_simulators_actors_go_before_the_real_run(tmp_path, monkeypatch, transport):
    # the review's finding: both jobs (their actors' state) were built before either ran and held
    # to the end: the simulator's through the real run. Weak references to each job and to the
    # simulator's network, read as the real network starts its run (no gc.collect here)
    import weakref

    from fedsim.experiment import run_scenario
    from fedsim.experiment import compare as compare_mod
    from fedsim.kernel import AsyncioNetwork, SimNetwork, TcpNetwork
    from fedsim.protocols import contract

    jobs, sims, seen = [], [], []
    check_job, sim_run = contract.check_job, SimNetwork.run
    real_cls = AsyncioNetwork if transport == "asyncio" else TcpNetwork
    real_run = real_cls.run

    def record_job(spec, job):
        jobs.append(weakref.ref(job))
        return check_job(spec, job)

    def record_sim(self, *a, **k):
        sims.append(weakref.ref(self))
        return sim_run(self, *a, **k)

    def look(self, *a, **k):
        seen.append({"sim job": jobs[0]() is None, "real job": jobs[1]() is None, "sim network": sims[0]() is None})
        return real_run(self, *a, **k)

    monkeypatch.setattr(contract, "check_job", record_job)
    monkeypatch.setattr(SimNetwork, "run", record_sim)
    monkeypatch.setattr(real_cls, "run", look)
    # (processes for tcp only: asyncio takes none, and compare_scenario refuses them, as --processes)
    res = run_scenario(compare_mod.compare_scenario("fedrec", transport, processes=2 if transport == "tcp" else None),
                       data="tiny",
                       out=tmp_path / "o", overrides={"T": 2}, quiet=True)
    assert seen == [{"sim job": True, "real job": False, "sim network": True}]
    summary = {r["network"].split(" ")[0]: r for r in _csv(tmp_path / "o" / "summary.csv")}
    assert set(summary) == {"sim", transport} and all(r["parameters_bit_identical"] == "True"
                                                      for r in summary.values())
    assert all(r["equal"] == "True" for r in _csv(tmp_path / "o" / "payload_bytes.csv"))
    assert res["out"]


def test_a_failed_comparison_counts_the_byte_counts_it_does_not_show(tmp_path, monkeypatch):
    # the message shows five differing byte counts and says how many more differ (a mutant that
    # said so only beyond six dropped the sixth without a word)
    from fedsim.experiment import ScenarioError, run_scenario
    from fedsim.experiment import compare as compare_mod

    real = compare_mod._outcome

    def outcome(ctx, spec, label, *args, **kw):
        out = real(ctx, spec, label, *args, **kw)
        shift = 0 if label == "sim" else 10
        out["groups"] = {("client", f"k{i}"): (1, i + shift, 20 + i) for i in range(6)}
        return out

    monkeypatch.setattr(compare_mod, "_outcome", outcome)
    mod = compare_mod.compare_scenario("demo", "asyncio")
    with pytest.raises(ScenarioError) as err:
        run_scenario(mod, out=tmp_path / "o", overrides={"rounds": 1, "clients": 2}, quiet=True)
    shown = "; ".join(f"client k{i} payload {i} B on the simulator, {i + 10} B on asyncio" for i in range(5))
    assert str(err.value) == (f"demo: the asyncio run differs from the simulator's: {shown}; "
                              "... (1 more byte counts differ)")


def test_a_failed_comparison_with_dropout_from_the_start_does_not_blame_the_window(tmp_path, monkeypatch):
    # dropout with the window 0,0 drops the same nodes from the start on both transports: the
    # explanation of real instants against simulated ones is not given (a mutant gave it for any dropout)
    from fedsim.experiment import ScenarioError, run_scenario
    from fedsim.experiment import compare as compare_mod
    from fedsim.kernel import NetSpec

    mod = compare_mod.compare_scenario("demo", "asyncio")
    monkeypatch.setattr(compare_mod, "same_bits", lambda a, b: False)
    with pytest.raises(ScenarioError) as err:
        run_scenario(mod, out=tmp_path / "o", overrides={"rounds": 1, "clients": 4, "deadline": 0.05}, quiet=True,
                     net=NetSpec(profile="lan", dropout=0.5, window=(0.0, 0.0)))
    assert str(err.value) == "demo: the asyncio run differs from the simulator's: parameters w differ"


def test_the_summary_gives_the_last_evaluations_metrics_as_final(tmp_path, monkeypatch):
    # final_* are the last evaluation's figures (a mutant took the first's); the runs' metrics
    # are replaced by three evaluations of known values
    from fedsim.experiment import run_scenario
    from fedsim.experiment import compare as compare_mod
    from fedsim.protocols import contract

    real = contract.check_result

    def check_result(spec, result, run=None):
        res = real(spec, result, run)
        res.metrics[:] = [{"round": 0, "hr": 0.25}, {"round": 1, "hr": 0.5}, {"round": 2, "hr": 0.75}]
        return res

    monkeypatch.setattr(contract, "check_result", check_result)
    run_scenario(compare_mod.compare_scenario("demo", "asyncio"), out=tmp_path / "o",
                 overrides={"rounds": 1, "clients": 2}, quiet=True)
    rows = _csv(tmp_path / "o" / "summary.csv")
    assert [float(r["final_hr"]) for r in rows] == [0.75, 0.75]


def _altered_compare(tmp_path, monkeypatch, alter, **overrides):
    """Run ``fedsim compare demo --against asyncio`` with ``alter(rows)`` applied to the asyncio
    run's ledger rows after its run; return the ScenarioError's message (None: it passed)."""
    from fedsim.experiment import ScenarioError, run_scenario
    from fedsim.experiment import compare as compare_mod
    from fedsim.kernel import AsyncioNetwork

    real_run = AsyncioNetwork.run

    def run(self, *a, **k):
        res = real_run(self, *a, **k)
        alter(self.ledger.rows)
        return res

    monkeypatch.setattr(AsyncioNetwork, "run", run)
    try:
        run_scenario(compare_mod.compare_scenario("demo", "asyncio"), out=tmp_path / "o",
                     overrides={"rounds": 2, "clients": 2, **overrides}, quiet=True)
    except ScenarioError as exc:
        assert list(tmp_path.iterdir()) == []  # a failed comparison writes no folder
        return str(exc)
    return None


def _msg(row, **change):
    """A ledger row as describe_message words (``change``: columns replaced)."""
    from fedsim.experiment.compare import describe_message

    d = {"round": row[1], "src": row[2], "dst": row[3], "kind": row[6], "bytes": row[7], "lost": row[15] == "lost"}
    d.update(change)
    return describe_message((d["round"], d["src"], d["dst"], d["kind"], d["bytes"], d["lost"]))


def _find(rows, rnd, src, dst, kind):
    (row,) = [r for r in rows if (r[1], r[2], r[3], r[6]) == (rnd, src, dst, kind)]
    return row


def _sizes(rows, want):
    a, b = _find(rows, 0, "server", "client/000", "weights"), _find(rows, 0, "server", "client/001", "weights")
    want.append(f"2 copies on the simulator without a match on asyncio: {_msg(a)}, {_msg(b)}; "
                f"2 copies on asyncio without a match on the simulator: {_msg(a, bytes=a[7] + 3)}, "
                f"{_msg(b, bytes=b[7] - 3)}")
    a[7] += 3
    b[7] -= 3


def _receiver(rows, want):
    b = _find(rows, 1, "server", "client/001", "weights")
    want.append(f"1 copy on the simulator without a match on asyncio: {_msg(b)}; "
                f"1 copy on asyncio without a match on the simulator: {_msg(b, dst='client/000')}")
    b[3] = "client/000"  # client/000 got round 1's weights twice, client/001 never


def _rounds(rows, want):
    a, b = _find(rows, 0, "client/000", "server", "gradient"), _find(rows, 1, "client/001", "server", "gradient")
    want.append(f"2 copies on the simulator without a match on asyncio: {_msg(a)}, {_msg(b)}; "
                f"2 copies on asyncio without a match on the simulator: {_msg(b, round=0)}, "
                f"{_msg(a, round=1)}")  # (by round: b, now labelled 0, first)
    a[1], b[1] = 1, 0


def _lost(rows, want):
    a = _find(rows, 1, "server", "client/001", "stop")
    want.append(f"1 copy on the simulator without a match on asyncio: {_msg(a)}; "
                f"1 copy on asyncio without a match on the simulator: {_msg(a, lost=True)}")
    a[15], a[18] = "lost", "link loss"


@pytest.mark.parametrize("alter", [_sizes, _receiver, _rounds, _lost], ids=["sizes", "receiver", "rounds", "lost"])
def test_compare_tells_offsetting_message_differences_that_equal_totals_hid(tmp_path, monkeypatch, alter):
    # the per (sender role, kind) totals were all the comparison checked: one copy 3 bytes larger and
    # another 3 smaller, a copy sent to the wrong receiver, copies labelled with other rounds, a copy
    # lost on one network only: each left every total equal and the comparison passed
    want = []
    err = _altered_compare(tmp_path, monkeypatch, lambda rows: alter(rows, want))
    assert len(want) == 1 and err == f"demo: the asyncio run differs from the simulator's: {want[0]}"


def test_describe_message_words():
    from fedsim.experiment.compare import describe_message

    assert describe_message((0, "server", "client/000", "weights", 64, False)) == \
        "round 0 weights server -> client/000 64 B"
    assert describe_message((3, "c", "s", "g", 7, True)) == "round 3 g c -> s 7 B (lost)"


def test_a_failed_message_comparison_shows_five_copies_of_each_side_and_counts_the_rest(tmp_path, monkeypatch):
    # 8 clients: round 0's weights alternately 1 byte larger and smaller, totals equal, 8 copies differ
    # on each side; the message names the first five of each and counts the others
    shown = {}

    def sizes(rows):
        ws = [r for r in rows if r[1] == 0 and r[6] == "weights"]
        assert len(ws) == 8
        shown["sim"] = [_msg(r) for r in ws[:5]]
        shown["asyncio"] = [_msg(r, bytes=r[7] + (1 if i % 2 == 0 else -1)) for i, r in enumerate(ws[:5])]
        for i, r in enumerate(ws):
            r[7] += 1 if i % 2 == 0 else -1

    err = _altered_compare(tmp_path, monkeypatch, sizes, clients=8)
    assert err == ("demo: the asyncio run differs from the simulator's: 8 copies on the simulator without a match "
                   f"on asyncio: {', '.join(shown['sim'])} and 3 more; 8 copies on asyncio without a match on the "
                   f"simulator: {', '.join(shown['asyncio'])} and 3 more")


def test_message_differences_compares_multisets_of_copies_in_any_order_and_from_a_streaming_ledger():
    from fedsim.experiment.compare import message_differences, message_keys
    from fedsim.kernel import Ledger, StreamingLedger

    sent = [(0, "s", "a", "m", 10, "delivered"), (0, "s", "b", "m", 10, "delivered"), (0, "a", "s", "g", 7, "lost"),
            (0, "a", "s", "g", 7, "delivered"), (1, "s", "a", "m", 12, "in_flight")]

    def ledger(rows, cls=Ledger, framing=0):
        led = cls(framing_bytes=framing)
        for rnd, src, dst, kind, payload, status in rows:
            row = led.new_row(rnd, src, dst, "r", "r", kind, payload + framing, 0, 0, 0.0, False)
            row[15] = status
            if status != "in_flight":
                row[14] = 1.0
        return led

    a = message_keys(ledger(sent))
    assert a["keys"].shape == (5, 6) and a["keys"].dtype.name == "int64"
    # another order, a streamed ledger, a framing of 25 bytes a copy (TcpNetwork's), in flight or
    # delivered alike: the same messages
    stream = ledger(sent[::-1], StreamingLedger, framing=25)
    b = message_keys(stream)
    stream.close()
    assert message_differences(a, b) == ([], [], 0, 0)
    assert message_differences(a, message_keys(ledger([]))) == (
        [(0, "s", "a", "m", 10, False), (0, "s", "b", "m", 10, False), (0, "a", "s", "g", 7, True),
         (0, "a", "s", "g", 7, False), (1, "s", "a", "m", 12, False)], [], 5, 0)
    # one of two equal copies missing, another duplicated; the lost one delivered instead
    other = [sent[0], sent[0], sent[3], sent[3], sent[4]]
    assert message_differences(a, message_keys(ledger(other))) == (
        [(0, "s", "b", "m", 10, False), (0, "a", "s", "g", 7, True)],
        [(0, "s", "a", "m", 10, False), (0, "a", "s", "g", 7, False)], 2, 2)


def _keyed_ledgers(chunk_rows):
    """The same rows (several rounds, senders that first show up as receivers, each fate, a
    framing of 25 bytes) in a Ledger and in a StreamingLedger whose file holds several chunks."""
    from fedsim.kernel import Ledger, StreamingLedger

    led, stream = Ledger(framing_bytes=25), StreamingLedger(framing_bytes=25, chunk_rows=chunk_rows)
    for i in range(23):
        fields = (i // 7, f"n{(i * 5) % 9}", f"n{(i * 3 + 1) % 11}", "r", "r", ("model", "grad", "noise")[i % 3],
                  25 + 10 + i, 0, 0, float(i), False)
        for one in (led, stream):
            row = one.new_row(*fields)
            row[15] = ("delivered", "lost", "in_flight")[i % 4 % 3]
            row[16] = row[15] == "delivered"
            if row[15] != "in_flight":
                row[14] = i + 0.5
    return led, stream


def test_message_keys_of_a_streaming_ledger_read_its_file_once_and_equal_the_in_memory_ledger_s():
    from fedsim.experiment.compare import KEY_COLUMNS, message_keys
    import numpy as np

    led, stream = _keyed_ledgers(chunk_rows=4)
    passes = []
    chunks = stream._chunks

    def counted():
        passes.append(1)
        return chunks()

    stream._chunks = counted  # one call: one pass over the file
    got = message_keys(stream)
    assert len(passes) == 1
    want = message_keys(led)
    stream.close()
    assert got["names"] == want["names"]
    np.testing.assert_array_equal(got["keys"], want["keys"])
    # and both are the rows' keys: codes numbered src values first, then dst, then kind, each in
    # order of first occurrence
    recs = list(led.records())
    names = list(dict.fromkeys([r["src"] for r in recs] + [r["dst"] for r in recs] + [r["kind"] for r in recs]))
    assert want["names"] == names
    code = {x: i for i, x in enumerate(names)}
    expect = [[r["round"], code[r["src"]], code[r["dst"]], code[r["kind"]], r["bytes"] - 25, r["status"] == "lost"]
              for r in recs]
    assert want["keys"].shape == (23, len(KEY_COLUMNS))
    assert want["keys"].tolist() == expect


def test_compare_gives_a_plugin_transport_processes_and_the_link_model_it_takes(tmp_path):
    # --processes went to the real run only when the transport's name was exactly "tcp": a
    # plug-in's TcpNetwork subclass ran with TcpNetwork's default (4) whatever was asked; and the
    # real run's spec had no link model, so a plug-in transport that takes link models ran with
    # fifo while the simulator ran with --link-model
    from fedsim.experiment import run_scenario
    from fedsim.experiment import compare as compare_mod
    from fedsim.kernel import NetSpec, SimNetwork, TcpNetwork, register_transport
    from fedsim.kernel.registry import TRANSPORT_REGISTRY

    got = []

    class CountedTcp(TcpNetwork):
        def __init__(self, **kwargs):  # (its signature names no processes: it subclasses TcpNetwork)
            got.append(("counted-tcp", kwargs.get("processes", "none given")))
            super().__init__(**kwargs)

    class LinkedSim(SimNetwork):
        def __init__(self, **kwargs):
            got.append(("linked-sim", kwargs.get("link_model", "none given")))
            super().__init__(**kwargs)

    def takes_processes(*, processes=4, **kwargs):  # (a function that names processes)
        got.append(("processes-fn", processes))
        kwargs.pop("framing_bytes")  # (given to a function; TcpNetwork's is its frame header)
        return TcpNetwork(processes=processes, **kwargs)

    snapshot = TRANSPORT_REGISTRY.snapshot()
    register_transport("counted-tcp", CountedTcp, "tcp, its constructions counted")
    register_transport("linked-sim", LinkedSim, "the simulator as a transport", link_models=True)
    register_transport("processes-fn", takes_processes, "tcp through a function")
    try:
        for transport in ("counted-tcp", "processes-fn"):
            run_scenario(compare_mod.compare_scenario("demo", transport, processes=2), out=tmp_path / transport,
                         overrides={"rounds": 1, "clients": 3}, quiet=True)
            rows = _csv(tmp_path / transport / "summary.csv")
            assert [r["network"].split(" ")[0] for r in rows] == ["sim", transport]
            assert rows[1]["parameters_bit_identical"] == "True"
        assert got == [("counted-tcp", 2), ("processes-fn", 2)]
        run_scenario(compare_mod.compare_scenario("demo", "linked-sim"), out=tmp_path / "linked",
                     overrides={"rounds": 1, "clients": 3}, quiet=True, net=NetSpec(profile="lan", link_model="fair"))
        rows = _csv(tmp_path / "linked" / "summary.csv")
        assert rows[0]["network"] == "sim (lan, fair link model)"
        assert rows[1]["parameters_bit_identical"] == "True"
        times = _csv(tmp_path / "linked" / "round_times.csv")
        assert times and all(r["simulated_s"] == r["measured_linked-sim_s"] for r in times)
    finally:
        TRANSPORT_REGISTRY.restore(snapshot)
    # (each built once, for the real run: the simulator's own network is a SimNetwork)
    assert got == [("counted-tcp", 2), ("processes-fn", 2), ("linked-sim", "fair")]


def test_compare_gives_a_plugin_transport_that_takes_framing_bytes_the_run_s(tmp_path):
    # the simulator's spec kept the run's framing_bytes, the real run's did not: a plug-in
    # transport that takes framing bytes ran with none while the simulator counted 16 a copy, so
    # their wire bytes and round times differed
    from fedsim.experiment import run_scenario
    from fedsim.experiment import compare as compare_mod
    from fedsim.kernel import NetSpec, SimNetwork, register_transport
    from fedsim.kernel.registry import TRANSPORT_REGISTRY

    got = []

    class FramedSim(SimNetwork):
        def __init__(self, **kwargs):
            got.append(kwargs.get("framing_bytes", "none given"))
            super().__init__(**kwargs)

    snapshot = TRANSPORT_REGISTRY.snapshot()
    register_transport("framed-sim", FramedSim, "the simulator as a transport, its framing recorded")
    try:
        run_scenario(compare_mod.compare_scenario("demo", "framed-sim"), out=tmp_path / "framed",
                     overrides={"rounds": 2, "clients": 3}, quiet=True, net=NetSpec(profile="lan", framing_bytes=16))
    finally:
        TRANSPORT_REGISTRY.restore(snapshot)
    assert got == [16]  # (built once, for the real run)
    rows = _csv(tmp_path / "framed" / "summary.csv")
    assert rows[1]["parameters_bit_identical"] == "True"
    payload = _csv(tmp_path / "framed" / "payload_bytes.csv")
    assert payload and all(int(r["wire_bytes_framed-sim"]) == int(r["payload_bytes_framed-sim"]) + 16 * int(r["messages"])
                           for r in payload)
    times = _csv(tmp_path / "framed" / "round_times.csv")
    assert [int(r["round"]) for r in times] == [0, 1]
    assert all(r["simulated_s"] == r["measured_framed-sim_s"] for r in times)


def test_compare_refuses_processes_for_a_transport_that_does_not_take_them(tmp_path):
    # --processes defaulted to 4, so an explicit one for asyncio (one process) was silently ignored;
    # now it is refused, naming the transport; without it, asyncio runs (and tcp's default is 4)
    res = subprocess.run([sys.executable, "-m", "fedsim", "compare", "demo", "--against", "asyncio", "--processes", "2",
                          "--set", "rounds=1", "--quiet", "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    assert res.stderr.splitlines() == ["error: --processes: transport 'asyncio' does not take processes (tcp, a "
                                       "TcpNetwork subclass or a transport whose constructor takes processes do)"]
    assert not (tmp_path / "o").exists()
    res = subprocess.run([sys.executable, "-m", "fedsim", "compare", "demo", "--against", "asyncio",
                          "--set", "rounds=1", "--quiet", "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert [r["network"].split(" ")[0] for r in _csv(tmp_path / "o" / "summary.csv")] == ["sim", "asyncio"]


def test_compare_gives_a_transport_that_takes_processes_four_when_none_are_given(tmp_path):
    # (the default moved from the option, 4, to None: a transport that takes processes still gets 4)
    from fedsim.experiment import run_scenario
    from fedsim.experiment import compare as compare_mod
    from fedsim.kernel import SimNetwork, register_transport
    from fedsim.kernel.registry import TRANSPORT_REGISTRY

    got = []

    def counted(*, processes, **kwargs):  # (names processes: takes them; runs the simulator)
        got.append(processes)
        return SimNetwork(**kwargs)

    snapshot = TRANSPORT_REGISTRY.snapshot()
    register_transport("counted-sim", counted, "the simulator, the processes it is given recorded")
    try:
        for processes in (None, 2):
            run_scenario(compare_mod.compare_scenario("demo", "counted-sim", processes), out=tmp_path / str(processes),
                         overrides={"rounds": 1, "clients": 3}, quiet=True)
    finally:
        TRANSPORT_REGISTRY.restore(snapshot)
    assert got == [compare_mod.DEFAULT_PROCESSES, 2] == [4, 2]


def test_compare_scenario_refuses_what_the_command_line_refuses(tmp_path):
    # compare_scenario("demo", "asyncio", processes=2) ran asyncio and ignored the 2, where
    # `fedsim compare --against asyncio --processes 2` is refused; compare_scenario("demo", "sim")
    # compared the simulator with itself (one row in the summary: both runs had the key "sim"),
    # where --against sim is refused. Now the API refuses them with the command line's messages,
    # the parameters named as in Python; nothing is run, no folder is made
    from fedsim.experiment import UsageError
    from fedsim.experiment.compare import compare_scenario

    cases = [(("asyncio", 2), "processes: transport 'asyncio' does not take processes (tcp, a TcpNetwork subclass "
                              "or a transport whose constructor takes processes do)"),
             (("tcp", 0), "processes must be at least 1, got 0"),
             (("tcp", 2.0), "processes must be a whole number of at least 1, got 2.0"),
             (("tcp", True), "processes must be a whole number of at least 1, got True"),
             (("sim", None), "transport 'sim': the simulator itself (it is the run compared with); known: "
                             "asyncio, tcp"),
             (("tpc", None), "transport 'tpc': unknown transport; known: asyncio, tcp; did you mean 'tcp'?"
                             "; a transport in a file of your own is loaded with fedsim --plugin FILE (or FEDSIM_PLUGINS=FILE)")]
    for (transport, processes), message in cases:
        with pytest.raises(UsageError) as err:
            compare_scenario("demo", transport, processes)
        assert str(err.value) == message
    # the command line says the same, naming its options
    res = subprocess.run([sys.executable, "-m", "fedsim", "compare", "demo", "--against", "tpc", "--out",
                          str(tmp_path / "o")], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert res.stderr.splitlines() == ["error: --against 'tpc': unknown transport; known: asyncio, tcp; did you "
                                       "mean 'tcp'?; a transport in a file of your own is loaded with fedsim --plugin FILE (or FEDSIM_PLUGINS=FILE)"]
    assert not (tmp_path / "o").exists()
    # what the command line accepts, the API accepts: asyncio without processes, tcp with 2
    assert compare_scenario("demo", "asyncio").PROTOCOL == "compare-demo"
    assert compare_scenario("demo", "tcp", 2).PROTOCOL == "compare-demo"


def test_against_tcp_the_simulator_predicts_with_tcps_25_byte_frame_header(tmp_path):
    # the simulator predicted with the run's framing_bytes (0 unless set) while every TCP frame
    # carries a 25-byte header beyond its document: the simulated round of demo (one client, one
    # round, lan) was 2.0019608800 ms, a prediction for 56 + 59 + 7 wire bytes where TCP put
    # 81 + 84 + 32 on the wire. Hand-computed on lan (1 Gbit/s = 1.25e8 B/s every port, 0.5 ms each
    # end, FIFO store and forward: each copy pays size / R at the sender's egress and again at the
    # receiver's ingress, and 1 ms of propagation), from the payload bytes both runs measured
    from fedsim.experiment import run_scenario
    from fedsim.experiment.compare import compare_scenario
    from fedsim.protocols.demo import make_data

    run_scenario(compare_scenario("demo", "tcp", 2), out=tmp_path / "o", quiet=True,
                 overrides={"rounds": 1, "clients": 1, "dim": 4})
    payload = {r["kind"]: r for r in _csv(tmp_path / "o" / "payload_bytes.csv")}
    assert sorted(payload) == ["gradient", "stop", "weights"]
    for r in payload.values():  # one copy of each; the simulator's wire bytes are TCP's
        assert int(r["messages"]) == 1
        assert int(r["wire_bytes_sim"]) == int(r["wire_bytes_tcp"]) == int(r["payload_bytes_sim"]) + 25
    R, lat = 1000 * 1e6 / 8, 0.0005 + 0.0005
    n = make_data(1, 4, 0)[1][0][0].shape[0]  # the client's samples (seed 0)

    def predicted(framing):
        size = {k: int(r["payload_bytes_sim"]) + framing for k, r in payload.items()}
        return (2 * size["weights"] / R + lat  # the server's weights to the client
                + 4 * n * 4 / 2e10  # the client's gradient: 4 x its X.size FLOPs at 2e10 FLOP/s
                + 2 * size["gradient"] / R + lat  # its gradient back
                + 2 * 4 / 1e11  # the server's step: 2 x dim x 1 gradient at 1e11 FLOP/s
                + 2 * size["stop"] / R + lat)  # stop (labelled round 0: the server's last round)

    (times,) = _csv(tmp_path / "o" / "round_times.csv")
    assert float(times["simulated_s"]) == pytest.approx(predicted(25), rel=1e-12)
    assert float(times["simulated_s"]) != pytest.approx(predicted(0), rel=1e-6)  # (6 x 25 B / R: 1.2 us more)
    assert ("predicts, each copy charged 25 framing bytes beyond its payload (tcp's own)."
            in (tmp_path / "o" / "report.md").read_text())


def test_compare_refuses_framing_bytes_tcp_cannot_show_and_a_transport_in_the_run_s_netspec(tmp_path):
    # framing_bytes 16 against tcp: the simulator predicted 16 bytes a copy, TCP sent 25; a NetSpec
    # whose transport is tcp: it was replaced by sim without a word (fedsim compare refuses
    # --transport). Both refused before either run, naming the setting; no folder is left.
    # framing_bytes 25 (tcp's own) is taken
    from fedsim.experiment import UsageError, run_scenario
    from fedsim.experiment.compare import compare_scenario
    from fedsim.kernel import NetSpec

    with pytest.raises(UsageError) as err:
        run_scenario(compare_scenario("demo", "tcp", 2), out=tmp_path / "o", quiet=True,
                     overrides={"rounds": 1, "clients": 2}, net=NetSpec(profile="lan", framing_bytes=16))
    assert str(err.value) == ("framing_bytes 16: transport 'tcp' frames each message itself, with its 25-byte frame "
                              "header, and the simulator predicts with those; leave framing_bytes at 0 or give 25")
    with pytest.raises(UsageError) as err:
        run_scenario(compare_scenario("demo", "asyncio"), out=tmp_path / "o", quiet=True,
                     overrides={"rounds": 1, "clients": 2}, net=NetSpec(profile="lan", transport="tcp"))
    assert str(err.value) == ("net: transport 'tcp': a comparison runs the simulator itself; the other transport is "
                              "compare_scenario's ('asyncio'; --against on the command line)")
    assert not (tmp_path / "o").exists()
    run_scenario(compare_scenario("demo", "tcp", 2), out=tmp_path / "o", quiet=True,
                 overrides={"rounds": 1, "clients": 2}, net=NetSpec(profile="lan", framing_bytes=25))
    payload = _csv(tmp_path / "o" / "payload_bytes.csv")
    assert payload and all(int(r["wire_bytes_sim"]) == int(r["wire_bytes_tcp"])
                           == int(r["payload_bytes_tcp"]) + 25 * int(r["messages"]) for r in payload)


def test_compare_on_the_ideal_profile_says_why_its_ratios_are_nan_and_gives_wall_times_in_table_units(tmp_path):
    # the ideal profile predicts 0 s rounds: every measured_over_simulated was NaN with no word of
    # why, and the note's wall times read "simulator 0.05 s, asyncio 0.01 s" ({:.2f} s, "0.00 s" for 4 ms)

    res = subprocess.run([sys.executable, "-m", "fedsim", "compare", "demo", "--against", "asyncio", "--profile",
                          "ideal", "--set", "rounds=2", "--quiet", "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    times = _csv(tmp_path / "o" / "round_times.csv")
    assert [(r["round"], r["simulated_s"], r["measured_over_simulated"]) for r in times] == [("0", "0.0", ""),
                                                                                           ("1", "0.0", "")]
    report = (tmp_path / "o" / "report.md").read_text()
    assert (" `measured_over_simulated` is NaN in rounds 0, 1: the simulator predicts 0 s (its `ideal` profile: no "
            "delay, free compute), and a ratio to 0 is no figure.") in report
    unit = r"[0-9.]+ (?:ns|µs|ms|s)"
    assert re.search(rf"Wall time: simulator {unit}, asyncio {unit}\. The measured round times are real seconds on "
                     r"this machine \(asyncio's clock", report), report


SIM_SUBCLASS = '''from fedsim.kernel import SimNetwork, register_transport


class Again(SimNetwork):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)


register_transport("sim-again", Again, "the simulator under another name")
'''


def test_the_reports_note_says_what_each_kind_of_transport_measured(tmp_path):
    # the note said of every transport "(forking, connecting and merging the ledger included)" and
    # "real seconds on this machine's loopback": of asyncio, which forks and connects nothing, and of
    # a plug-in's SimNetwork subclass, whose round times are simulated seconds
    (tmp_path / "again.py").write_text(SIM_SUBCLASS)
    notes = {}
    for against in ("asyncio", "sim-again"):
        res = subprocess.run([sys.executable, "-m", "fedsim", "--plugin", "again.py", "compare", "demo", "--against",
                              against, "--set", "rounds=2", "--quiet", "--out", against], capture_output=True,
                             text=True, timeout=120, cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        notes[against] = next(line for line in (tmp_path / against / "report.md").read_text().splitlines()
                              if line.startswith("Final parameters"))
    for note in notes.values():
        assert "forking" not in note and "loopback" not in note
    # (wall times in the tables' units: "12.3 ms", "1.2 s")
    wall = r"Wall time: simulator [0-9.]+ (?:ns|µs|ms|s), {} [0-9.]+ (?:ns|µs|ms|s)\. "

    def after_wall(against: str) -> str:
        return re.split(wall.format(re.escape(against)), notes[against], maxsplit=1)[1]

    assert (", sim-again " in notes["sim-again"] and after_wall("sim-again") ==
            "The sim-again run's round times are simulated seconds too (sim-again is a simulated transport: its own "
            "model of time, not a measurement); the simulator's are what its `lan` profile predicts, each copy "
            "charged 0 framing bytes beyond its payload (sim-again's own).")
    assert after_wall("asyncio") == (
        "The measured round times are real seconds on this machine (asyncio's clock, not a model of the network); the "
        "simulator's are what its `lan` profile predicts, each copy charged 0 framing bytes beyond its payload "
        "(asyncio's own).")
    sim, again = _csv(tmp_path / "sim-again" / "round_times.csv")[0], _csv(tmp_path / "sim-again" / "summary.csv")
    assert float(sim["simulated_s"]) == float(sim["measured_sim-again_s"]) > 0
    assert again[0]["run_duration_s"] == again[1]["run_duration_s"]


SLOW_SIM = '''from fedsim.kernel import SimNetwork, register_transport


class SlowSim(SimNetwork):
    """The simulator with every node's computation 1000 times slower: the same messages, later."""

    def add_node(self, node_id, actor, *args, flops=None, **kwargs):
        super().add_node(node_id, actor, *args, flops=1e6, **kwargs)


register_transport("slow-sim", SlowSim, "the simulator, computation at 1 MFLOP/s")
'''


def test_a_failed_comparison_with_dropout_against_a_simulated_transport_says_no_real_instant(tmp_path):
    # the reason given for dropout in a window was "a node drops out at a real instant on slow-sim":
    # a plug-in's SimNetwork subclass drops it out at the same simulated instant as the simulator
    (tmp_path / "slow.py").write_text(SLOW_SIM)
    res = subprocess.run([sys.executable, "-m", "fedsim", "--plugin", "slow.py", "compare", "fedrec", "--against",
                          "slow-sim", "--data", "tiny", "--set", "T=3", "--set", "deadline=0.01", "--dropout", "0.5",
                          "--dropout-window", "0,0.02", "--out", "c"], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().endswith(
        "; with dropout at times in [0.0, 0.02] s, a node drops out at the same simulated instant on both, which "
        "slow-sim's own timing finds at another point of the protocol, so the messages it costs can differ "
        "(--dropout-window 0,0 drops the same nodes from the start on both)"), res.stderr


TCP2 = '''from functools import partial

from fedsim.kernel import TcpNetwork, register_transport

register_transport("tcp2", partial(TcpNetwork, processes=2), "tcp on 2 processes")
'''

TCP2_DRIVER = '''import sys

from fedsim.protocols import load_plugins

load_plugins([sys.argv[1]])
from fedsim.experiment import compare as cm, run_scenario
from fedsim.kernel import TcpNetwork

seen, run = [], TcpNetwork.run


def look(self, *args, **kwargs):
    seen.append(self.processes)
    return run(self, *args, **kwargs)


TcpNetwork.run = look
run_scenario(cm.compare_scenario("demo", "tcp2"), out=sys.argv[2], overrides={"rounds": 1, "clients": 4}, quiet=True)
run_scenario(cm.compare_scenario("demo", "tcp2", 3), out=sys.argv[3], overrides={"rounds": 1, "clients": 4}, quiet=True)
print(seen)
'''


def test_compare_against_a_partial_that_binds_processes_runs_with_them_unless_told(tmp_path):
    # compare gave every transport that takes processes DEFAULT_PROCESSES (4) when none were given,
    # over the 2 a plug-in's partial(TcpNetwork, processes=2) registered as "tcp2" binds
    (tmp_path / "tcp2.py").write_text(TCP2)
    (tmp_path / "driver.py").write_text(TCP2_DRIVER)
    res = subprocess.run([sys.executable, "driver.py", "tcp2.py", "a", "b"], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "[2, 3]"
