"""Tests written from a hand mutation-testing pass over the code that turns runs into the papers'
tables (the FPL verdicts and seed figures, FedRec++'s Table 3 bookkeeping, FedRec's fold
statistics, PersonalFR's tables and checks, the FPL and PersonalFR communication tables): each
one fails with a specific mutant of the code applied (named in its docstring) and checks the
table against an independent computation (figures by hand, a plain loop over a small synthetic
study or ledger), never against the function's own output."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from fedsim.math.stats import TestResult as Result

# ---------------------------------------------------------------------------------------------
# fedsim/studies/fpl/analysis.py: the verdicts and the seed figures


def _stub_compare(monkeypatch, pvalues: dict, seen: list | None = None):
    """analysis.compare stubbed: the comparison (a, b) has the t-test p and the difference
    ``pvalues[(a, b)]`` (50 users); ``seen`` collects the pairs compared."""
    from fedsim.studies.fpl import analysis

    def compare(st, a, b, metric="p"):
        if seen is not None:
            seen.append((a, b))
        p, diff = pvalues[(a, b)]
        return analysis.Comparison(a, b, metric, diff, diff - 0.01, diff + 0.01,
                                   Result(1.0, p, 50, diff, "paired t"), Result(1.0, p, 50, diff, "wilcoxon"))

    monkeypatch.setattr(analysis, "compare", compare)


def _study(p_by_method: dict, seeds=(0,)):
    """A study whose chosen model of each method has the test P@10 ``p_by_method[m]`` (one value
    per seed, or one for all), no FPL runs."""
    def entry(v):
        return SimpleNamespace(entry={"test_p": v, "test_ic": 1.0, "test_gini": 0.5})

    chosen = {m: {s: entry(v[k] if isinstance(v, (list, tuple)) else v) for k, s in enumerate(seeds)}
              for m, v in p_by_method.items()}
    return SimpleNamespace(chosen=chosen, seeds=list(seeds), fpl_runs=lambda: {})


USER_KNN_CLAIM = "User-kNN is the strongest baseline apart from the VAE (P@10)"


def test_user_knn_claim_compares_the_top_two_baselines_by_mean_p(monkeypatch):
    """Mutants of claim 1 of ``verdicts``: the baselines sorted by ascending P@10 (the weakest
    taken for the strongest); User-kNN compared with the weakest baseline, not the next one;
    a significantly stronger baseline read as "reproduced"; a pool of User-kNN alone compared
    (``len(pool) > 0``: an IndexError). By hand: P@10 Random 0.01 < FCF 0.02 < Top-Pop 0.05 <
    BPR-MF 0.08 < User-kNN 0.10, so User-kNN is compared with BPR-MF."""
    from fedsim.studies.fpl import analysis

    seen: list = []
    p = {("User-kNN", "BPR-MF"): (0.001, 0.02), ("BPR-MF", "User-kNN"): (0.001, 0.02)}
    _stub_compare(monkeypatch, p, seen)
    st = _study({"Random": 0.01, "FCF": 0.02, "Top-Pop": 0.05, "BPR-MF": 0.08, "User-kNN": 0.10})
    row = {r["claim"]: r for r in analysis.verdicts(st)}[USER_KNN_CLAIM]
    assert seen == [("User-kNN", "BPR-MF")]
    assert row["verdict"] == "reproduced"
    assert row["evidence"].startswith("User-kNN has the highest P@10 (0.1000); against the next, User-kNN - BPR-MF")

    # BPR-MF (0.12) above User-kNN, significantly: the claim is contradicted
    seen.clear()
    st = _study({"Random": 0.01, "BPR-MF": 0.12, "User-kNN": 0.10})
    row = {r["claim"]: r for r in analysis.verdicts(st)}[USER_KNN_CLAIM]
    assert seen == [("BPR-MF", "User-kNN")]
    assert row["verdict"] == "contradicted"
    assert row["evidence"].startswith("BPR-MF has the highest P@10 (0.1200, User-kNN 0.1000)")

    # User-kNN alone: nothing to compare it with
    seen.clear()
    row = {r["claim"]: r for r in analysis.verdicts(_study({"User-kNN": 0.10}))}[USER_KNN_CLAIM]
    assert seen == [] and row["verdict"] == "not run"


def test_comparable_to_bpr_says_which_way_a_significant_difference_goes(monkeypatch):
    """Mutant: the "comparable" claims' contradiction naming the direction the wrong way round
    (``'higher' if diff < 0``). sFPL is significantly below BPR-MF (diff -0.02), pFPL above (+0.02);
    the family of two tests: Holm's p 0.001 x 2 < 0.05."""
    from fedsim.studies.fpl import analysis

    _stub_compare(monkeypatch, {("sFPL", "BPR-MF"): (0.001, -0.02), ("pFPL", "BPR-MF"): (0.001, 0.02)})
    rows = {r["claim"]: r for r in analysis.verdicts(_study({"sFPL": 0.1, "pFPL": 0.1, "BPR-MF": 0.1}))}
    assert rows["sFPL is comparable to BPR-MF (P@10)"]["verdict"] == "contradicted (significantly lower)"
    assert rows["pFPL is comparable to BPR-MF (P@10)"]["verdict"] == "contradicted (significantly higher)"


def test_ic_gini_verdict_reads_the_sign_of_the_seed_differences(monkeypatch):
    """Mutants of claim 4: the seed-paired verdict read with the sign of the difference flipped
    (``word(-t.mean_diff, +1)``: a significantly *lower* G@10 "reproduced"), and "higher in k of n
    seeds" counting ties as higher (``a >= b``). By hand: G@10 of sFPL+ minus sFPL is -0.050,
    -0.051, -0.049 (a paired t of about -87 on 2 degrees of freedom: p about 1e-4, below 0.05 after
    Holm's x 2); IC@10 10, 11, 12 against 10, 16, 17: higher in 0 of 3 seeds (one tie)."""
    from fedsim.studies.fpl import analysis

    monkeypatch.setattr(analysis, "compare", lambda st, a, b, metric="p": SimpleNamespace(
        diff=0.0, t=SimpleNamespace(pvalue=math.nan), text=lambda: "(compared)"))
    plus_ic, plain_ic = [10.0, 11.0, 12.0], [10.0, 16.0, 17.0]
    plus_g, plain_g = [0.40, 0.45, 0.50], [0.45, 0.501, 0.549]
    chosen = {"sFPL+": {s: SimpleNamespace(entry={"test_ic": plus_ic[s], "test_gini": plus_g[s]}) for s in range(3)},
              "sFPL": {s: SimpleNamespace(entry={"test_ic": plain_ic[s], "test_gini": plain_g[s]}) for s in range(3)}}
    st = SimpleNamespace(chosen=chosen, seeds=[0, 1, 2], fpl_runs=lambda: {})
    rows = {r["claim"]: r for r in analysis.verdicts(st)}
    gini = rows["G@10 of sFPL+ above sFPL (more local computation)"]
    assert gini["verdict"] == "contradicted"
    ic = rows["IC@10 of sFPL+ above sFPL (more local computation)"]
    assert ic["evidence"].startswith("sFPL+ 11 vs sFPL 14.33 (mean over 3 seed(s)); higher in 0 of 3 seed(s), ")
    assert ic["verdict"] == "not distinguishable on this data"  # differences 0, -5, -5: t = -2, p about 0.18


def test_seed_stats_sample_sd_and_a_diverged_seed_counts_zero():
    """Mutants of ``seed_stats``: the population sd (ddof 0) for the sample sd its docstring
    gives; a diverged chosen model's NaN figure kept (the mean NaN) rather than counted as 0 (it
    recommends nothing). By hand: 0.1, 0.2, 0.6 -> mean 0.3, sd sqrt((0.04 + 0.01 + 0.09) / 2);
    NaN, 0.2, 0.4 -> mean 0.2, sd 0.2."""
    from fedsim.studies.fpl import seed_stats

    st = _study({"BPR-MF": [0.1, 0.2, 0.6], "sFPL": [math.nan, 0.2, 0.4]}, seeds=(0, 1, 2))
    mean, sd = seed_stats(st, "BPR-MF", "p")
    assert mean == pytest.approx(0.3) and sd == pytest.approx(math.sqrt(0.14 / 2))
    mean, sd = seed_stats(st, "sFPL", "p")
    assert mean == pytest.approx(0.2) and sd == pytest.approx(0.2)


def test_fig2_rows_mean_and_sample_sd_over_seeds():
    """Mutants of ``fig2_rows``: the median over seeds for the mean; the population sd for the
    sample sd. By hand: F1 0.1, 0.2, 0.6 over three seeds -> mean 0.3, sd sqrt(0.07); the epochs
    listed in seed order."""
    from fedsim.studies.fpl import fig2_rows

    f1 = [0.1, 0.2, 0.6]
    entries = {s: {"epoch": 10 * (s + 1), **{f"test_{k}": (f1[s] if k == "f1" else 1.0)
                                            for k in ("f1", "p", "r", "ndcg", "ic", "gini")}} for s in range(3)}
    st = SimpleNamespace(seeds=[0, 1, 2], fpl_runs=lambda: {("pFPL", 0.5, s): None for s in range(3)},
                         fpl_choice=lambda preset, pi, s: entries[s])
    (row,) = fig2_rows(st)
    assert (row["preset"], row["pi"], row["epochs"]) == ("pFPL", 0.5, "10,20,30")
    assert row["f1"] == pytest.approx(0.3) and row["f1_sd"] == pytest.approx(math.sqrt(0.07))
    assert row["p"] == 1.0 and row["p_sd"] == 0.0


_NOISE = np.array([0.0, 0.01, -0.01, 0.02, -0.02, 0.005, -0.005, 0.0])


def _peak_study(monkeypatch, curves: dict):
    """A study of FPL runs only: ``curves[(preset, pi)]`` is one per-user F1@10 vector per seed
    (8 users), handed to ``verdicts`` through ``entry_user_values``."""
    from fedsim.studies.fpl import analysis

    seeds = [0, 1]
    runs = {(preset, pi, s): None for (preset, pi) in curves for s in seeds}
    st = SimpleNamespace(chosen={}, seeds=seeds, fpl_runs=lambda: runs,
                         fpl_choice=lambda preset, pi, s: {"f1": curves[(preset, pi)][s]})
    monkeypatch.setattr(analysis, "entry_user_values", lambda st, entry, metric: entry[metric])
    return {r["claim"]: r for r in analysis.verdicts(st)}


def test_f1_peak_claims_by_hand(monkeypatch):
    """Mutants of claim 5 (F1@10 peaks at an interior pi): the peak taken as the lowest pi's F1
    (``min``); the first pi counted as interior; the interior peak "reproduced" only when it is
    *below* the last pi (``c.diff < 0``); the interior peak compared with the first pi rather
    than the last; the per-user values of the first seed alone (``st.seeds[:1]``); a preset run at
    two values of pi judged (``len(mine) < 2``: no interior pi, a ValueError).

    By hand, sFPL at pi 0.2, 0.6, 1.0, seeds 0 and 1 (per user, plus a small zero-sum noise at
    0.6): 0.1 / 0.1; 0.2 / 0.8; 0.5 / 0.0 -> means over seeds 0.1, 0.5, 0.25: the peak is at 0.6,
    0.25 above pi = 1 for every user up to the noise (significant): reproduced. Seed 0 alone
    peaks at pi = 1. sFPL+ peaks at the first pi (0.6 against 0.3 and 0.1 at 0.6 and 1.0):
    contradicted, against the best interior pi. pFPL ran at two pis: not run."""
    u = np.ones(8)
    rows = _peak_study(monkeypatch, {
        ("sFPL", 0.2): [0.1 * u, 0.1 * u], ("sFPL", 0.6): [0.2 * u + _NOISE, 0.8 * u + _NOISE],
        ("sFPL", 1.0): [0.5 * u, 0.0 * u],
        ("sFPL+", 0.2): [0.6 * u + _NOISE, 0.6 * u + _NOISE], ("sFPL+", 0.6): [0.3 * u, 0.3 * u],
        ("sFPL+", 1.0): [0.1 * u, 0.1 * u],
        ("pFPL", 0.2): [0.1 * u, 0.1 * u], ("pFPL", 1.0): [0.2 * u, 0.2 * u]})
    s = rows["sFPL: F1@10 peaks at an interior pi, not at pi = 1"]
    assert s["verdict"] == "reproduced"
    assert s["evidence"].startswith("peak at pi = 0.6; pi=0.6 - pi=1 F1@10 = +0.2500 (95 % CI")
    assert s["evidence"].endswith("F1@10 by pi: 0.2: 0.1000, 0.6: 0.5000, 1: 0.2500 (the peak of 3 noisy values is "
                                  "biased upwards, so a peak alone is no evidence)")
    sp = rows["sFPL+: F1@10 peaks at an interior pi, not at pi = 1"]
    assert sp["verdict"] == "contradicted"
    assert sp["evidence"].startswith("peak at pi = 0.2; pi=0.2 - pi=0.6 F1@10 = +0.3000")
    p = rows["pFPL: F1@10 peaks at an interior pi, not at pi = 1"]
    assert (p["verdict"], p["evidence"]) == ("not run", "needs at least 3 values of pi (ran 2)")


def test_compare_users_drops_a_user_undefined_in_either_method():
    """Mutant: ``compare_users`` dropping the users whose value is NaN in ``a`` only (a NaN in
    ``b`` made the difference, its CI and the tests NaN). By hand: 7 users, the last NaN in b;
    differences 0.1 x (1..6) -> mean 0.35 over 6 users."""
    from fedsim.studies.fpl import compare_users

    a = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.9])
    b = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, np.nan])
    c = compare_users("A", "B", "p", a, b)
    assert c.n == 6 and c.diff == pytest.approx(0.35) and math.isfinite(c.low) and c.t.pvalue < 0.05


# ---------------------------------------------------------------------------------------------
# fedsim/studies/fedrecpp.py: what a run left out (the `incomplete` table)


def test_fedrecpp_left_out_and_incomplete_rows_by_hand():
    """Mutants of ``left_out`` / ``warn_incomplete``: ``left_out_clients`` counting the records
    rather than summing their clients left out (``left_out``; ``clients`` counts the messages
    missing); ``lost_clients`` counting runs with a lost client rather
    than the clients; ``keyless_clients`` summing the records that are *not* key records;
    ``rounds_left_out_of`` listing the set-up round -1 (a lost key) as a round left out of, or a
    round twice for its two records (gradients and a denoised sum missing).

    By hand: run A lost the keys of 2 clients (round -1), left 3 clients out of round 0 (a
    gradients upload missing broke their group; a denoiser's sum missing too, its group already
    out) and 1 out of round 2, and lost clients 4 and 7; run B is complete; run C lost client 1.
    Summed: 2 incomplete runs, 2 rounds left out of, 2 + 3 + 1 = 6 clients left out, 3 clients
    lost."""
    from fedsim.studies.fedrecpp import PPOutcome, left_out, warn_incomplete

    def run(fold, missing, lost):
        return PPOutcome(fold, None, 0.7, 0.9, None, 1.0, missing=missing, lost_clients=lost)

    a = run(0, [{"round": -1, "kind": "keys", "clients": 2, "groups": 0, "left_out": 2},
                {"round": 0, "kind": "gradients", "clients": 1, "groups": 1, "left_out": 3},
                {"round": 0, "kind": "denoised", "clients": 1, "groups": 0, "left_out": 0},
                {"round": 2, "kind": "denoised", "clients": 1, "groups": 1, "left_out": 1}], [4, 7])
    b, c = run(1, [], []), run(2, [], [1])
    assert left_out([a, b, c]) == {"incomplete_runs": 2, "left_out_rounds": 2, "left_out_clients": 6,
                                   "lost_clients": 3}
    tables, caveats = [], []
    ctx = SimpleNamespace(table=lambda name, rows, title="": tables.append((name, rows)),
                          caveat=lambda key, text: caveats.append(key))
    rows = warn_incomplete(ctx, [("A", a), ("B", b), ("C", c)])
    assert rows == [
        {"run": "A", "fold": 1, "incomplete_runs": 1, "left_out_rounds": 2, "left_out_clients": 6, "lost_clients": 2,
         "keyless_clients": 2, "rounds_left_out_of": "0,2"},
        {"run": "C", "fold": 3, "incomplete_runs": 1, "left_out_rounds": 0, "left_out_clients": 0, "lost_clients": 1,
         "keyless_clients": 0, "rounds_left_out_of": ""}]
    assert tables == [("incomplete", rows)] and caveats == ["incomplete"]


# ---------------------------------------------------------------------------------------------
# fedsim/studies/fedrec.py: the communication per iteration (fedrec_table2's comm table)


def _hand_ledger(messages, roles, unit, framing=0):
    """A network holding a kernel Ledger of ``messages`` (round, src, dst, kind, wire bytes,
    floats, status, send time, arrival time) and the nodes' ``roles``."""
    from fedsim.kernel.ledger import ARRIVAL, STATUS, Ledger

    led = Ledger(unit=unit, framing_bytes=framing)
    for node, role in roles.items():
        led.set_role(node, role)
    for rnd, src, dst, kind, nbytes, floats, status, t, arrival in messages:
        row = led.new_row(rnd, src, dst, roles[src], roles[dst], kind, nbytes, 4 * floats, floats, t, False)
        row[STATUS] = status
        row[ARRIVAL] = arrival
    return SimpleNamespace(ledger=led)


def test_fedrec_comm_per_iteration_from_a_hand_made_ledger():
    """Mutants of ``comm_per_iteration``: one iteration too many (``len(rounds) + 1``); the
    download floats or the messages not divided by the iterations; the bytes without the
    network's framing (array bytes). By hand, 2 iterations, 2 clients: models of 40 B on the
    wire and 6 floats to each client in each round, gradients of 20 B and 3 floats back (one lost:
    sent, it counts), an evaluation message (not training) of 9 B."""
    from fedsim.studies.fedrec import comm_per_iteration

    roles = {"s": "server", "a": "client", "b": "client"}
    msgs = []
    for t in (0, 1):
        msgs += [(t, "s", "a", "model", 40, 6, "delivered", 0.0, 1.0), (t, "s", "b", "model", 40, 6, "delivered", 0.0, 1.0),
                 (t, "a", "s", "gradients", 20, 3, "delivered", 1.0, 2.0),
                 (t, "b", "s", "gradients", 20, 3, "lost" if t else "delivered", 1.0, 2.0 if not t else math.nan)]
    msgs.append((1, "a", "s", "eval", 9, 0, "delivered", 2.0, 3.0))
    net = _hand_ledger(msgs, roles, unit=3, framing=5)
    out = comm_per_iteration(net, None)
    # per iteration: 2 x 40 + 2 x 20 = 120 bytes on the wire (the framing in them); 2 x 24 + 2 x 12 = 72 array bytes
    # by direction: 2 x 40 down, 2 x 20 up on the wire; 2 x 24 and 2 x 12 array bytes; the
    # evaluation message kept apart (a total, not per iteration); no key exchange
    assert out == {"bytes": 120.0, "raw_bytes": 72.0, "floats": 18.0, "download_floats": 12.0, "upload_floats": 6.0,
                   "messages": 4.0, "iterations": 2, "download_bytes": 80.0, "upload_bytes": 40.0,
                   "download_raw_bytes": 48.0, "upload_raw_bytes": 24.0, "setup_bytes": 0, "setup_messages": 0,
                   "eval_bytes": 9, "eval_messages": 1}


def test_fedrec_comm_per_iteration_refuses_a_training_message_of_no_direction():
    """A training message neither from nor to the server (FedRec sends none) has no direction:
    it would be in ``bytes`` but in neither ``download_*`` nor ``upload_*``. An error naming it."""
    from fedsim.studies.fedrec import comm_per_iteration

    roles = {"s": "server", "a": "client", "b": "client"}
    msgs = [(0, "s", "a", "model", 40, 6, "delivered", 0.0, 1.0), (0, "a", "b", "gradients", 20, 3, "delivered", 1.0, 2.0)]
    with pytest.raises(ValueError, match="'gradients' from a to b \\(round 0\\) is neither a download nor an upload"):
        comm_per_iteration(_hand_ledger(msgs, roles, unit=3), None)


# ---------------------------------------------------------------------------------------------
# fedsim/studies/personalfr/report.py: the accuracy and communication tables


def _pfr_run(method, M, seed, curve, *, down=100.0, up=10.0, validation=False, n_users=30):
    """One PersonalFR-scenario outcome (explicit task, RMSE) with the evaluations ``curve``
    ((round, rmse), ...); best (lowest) and final read off it by hand."""
    vals = [v for _, v in curve]
    finite = [v for v in vals if v == v]
    best = min(finite)
    return {"task": "explicit", "method": method, "M": M, "n_users": n_users, "n_items": 40, "seed": seed,
            "validation": validation, "rounds": 6, "rounds_run": 6, "best": best, "final": vals[-1],
            "best_round": next(r for r, v in curve if v == best), "wall_s": 1.0,
            "history": [{"round": r, "rmse": v} for r, v in curve], "clients_per_round": 2, "client_flops": 6e9,
            "comm": {"bytes_per_round": 1.0, "down_bytes_per_client": down, "up_bytes_per_client": up,
                     "setup_bytes": 0}}


def test_personalfr_tables_selected_on_validation_nan_runs_and_comm_by_hand(tmp_path):
    """Mutants of ``result_tables``: the selected figure read as each run's best on test
    (``sel_vals = best``) and its round as the first repeat's best round, not the round the
    validation run chose; ``nan_runs`` counting every group's NaN repeats so far (``len(with_nan)``);
    the communication table's download per client read from the upload column; ``label_M``
    naming M = 0 (one user per client) "0" rather than "all".

    By hand: FedAvg M = 4's validation run is best at round 4; its test repeats' RMSE at rounds
    2, 4, 6 are 1.0, 0.9, 0.8 and 1.1, 0.7, 0.75: selected (round 4) 0.9, 0.7 -> mean 0.8,
    population std 0.1; best on test 0.8, 0.7 -> 0.75; downloads 100 and 120 B -> 110, uploads
    10 and 20 -> 15. PersonalFR at M = 0 has one repeat whose last evaluation is NaN (nan_runs 1)
    and FedAvg none (nan_runs 0)."""
    from fedsim.experiment.context import RunContext
    from fedsim.studies.personalfr import result_tables

    outs = [_pfr_run("fedavg", 4, 0, [(2, 1.2), (4, 0.95), (6, 0.97)], validation=True),
            _pfr_run("fedavg", 4, 1, [(2, 1.0), (4, 0.9), (6, 0.8)], down=100.0, up=10.0),
            _pfr_run("fedavg", 4, 2, [(2, 1.1), (4, 0.7), (6, 0.75)], down=120.0, up=20.0),
            _pfr_run("personalfr", 0, 1, [(2, 1.0), (4, 0.9), (6, 0.85)]),
            _pfr_run("personalfr", 0, 2, [(2, 1.0), (4, 0.9), (6, math.nan)])]
    ctx = RunContext("t", {}, "tiny", 1, None, tmp_path, quiet=True)
    rows = result_tables(ctx, outs, title="t")
    by = {(r["method"], r["clients"]): r for r in rows}
    assert list(by) == [("personalfr", "all"), ("fedavg", "4")]  # M = 0 ("all") sorts first, as 0
    fa = by[("fedavg", "4")]
    assert (fa["selected_round"], fa["selected_on"], fa["validation_metric"]) == (4, "validation", 0.95)
    assert fa["selected"] == pytest.approx(0.8) and fa["selected_std"] == pytest.approx(0.1)
    assert fa["best_on_test"] == pytest.approx(0.75) and fa["nan_runs"] == 0 and fa["repeats"] == 2
    pf = by[("personalfr", "all")]
    assert pf["nan_runs"] == 1 and pf["paper_ml1m"] == 0.8983
    (comm,) = [t for t in ctx.tables if t.name == "results_comm"]
    c = {(r["method"], r["clients"]): r for r in comm.rows}[("fedavg", "4")]
    assert (c["down_bytes_per_client"], c["up_bytes_per_client"]) == (110.0, 15.0)


# ---------------------------------------------------------------------------------------------
# scenarios fpl_tcc and fpl_table2: CCE, TCC and Table 4 read off the runs' curves


def _fpl_rec(ledger, exact, formula, nbytes):
    """An FPL run record of len(ledger) epochs: per epoch the ledger's vectors, the clients'
    exact count, the closed form (constant), bytes; 10 messages and 1 s an epoch."""
    curve = [{"epoch": e + 1, "cce_ledger": float(ledger[e]), "cce_exact": float(exact[e]), "cce_formula": formula,
              "cce_formula_paper": formula + 4.0, "positives_sent": 5 + e, "bytes": nbytes[e], "messages": 10,
              "wall_s": 1.0, "test_p": 0.1} for e in range(len(ledger))]
    return SimpleNamespace(curve=curve, params={"clients_per_round": 3, "triples": 7, "rounds_per_epoch": 2})


def _tcc_study():
    """pFPL at pi 0.5, seeds 0 and 1: seed 0 ran 2 epochs, chosen at epoch 2 (P@10 0.2), seed 1
    ran 3, chosen at epoch 3 (P@10 0.4); seed 1's ledger count of epoch 3 is 110 where the
    clients counted 111."""
    recs = {0: _fpl_rec([100, 110], [100, 110], 100.0, [1000, 1100]),
            1: _fpl_rec([90, 100, 110], [90, 100, 111], 120.0, [900, 1000, 1100])}
    choice = {0: {"epoch": 2, "test_p": 0.2}, 1: {"epoch": 3, "test_p": 0.4}}
    return SimpleNamespace(seeds=[0, 1], fpl_runs=lambda: {("pFPL", 0.5, s): r for s, r in recs.items()},
                           fpl_choice=lambda preset, pi, s: choice[s], recs=recs, choice=choice)


def test_fpl_tcc_rows_by_hand():
    """Mutants of ``fpl_tcc.tcc_rows``: TCC summed one epoch past the chosen one; the closed-form
    TCC one epoch too many; the CCE difference taken formula / ledger; the sd over seeds with
    ddof 0; P@10 of the first seed alone; the mean CCE over the first epoch alone;
    ``tcc_equals_exact_count`` always true; runs that peaked at their last epoch counted as those
    that did not.

    By hand: mean CCE (100 + 110) / 2 = 105 and (90 + 100 + 110) / 3 = 100 -> 102.5, 2.5 % above
    seed 0's closed form 100 (the row reads the first seed's); TCC 100 + 110 = 210 and
    90 + 100 + 110 = 300 -> mean 255, sd 45 sqrt(2); closed form 100 x 2 and 100 x 3 -> 250, 2 %
    below; exact counts 210 and 301 (not the ledger's); P@10 0.3, sd 0.1 sqrt(2); both seeds
    peaked at their last epoch; positives 5, 6, 5, 6, 7 and bytes 1000, 1100, 900, 1000, 1100 an
    epoch."""
    from fedsim.experiment import load_scenario

    (row,) = load_scenario("fpl_tcc").tcc_rows(_tcc_study())
    assert (row["preset"], row["pi"], row["seeds"], row["epochs"], row["epochs_run"]) == ("pFPL", 0.5, 2, "2,3", "2,3")
    assert row["cce_ledger"] == pytest.approx(102.5) and row["cce_formula"] == 100.0
    assert row["cce_diff_pct"] == pytest.approx(2.5) and row["cce_paper_diff_pct"] == pytest.approx(100 * (102.5 / 104 - 1))
    assert row["tcc"] == pytest.approx(255.0) and row["tcc_sd"] == pytest.approx(45 * math.sqrt(2))
    assert row["tcc_formula"] == pytest.approx(250.0) and row["tcc_diff_pct"] == pytest.approx(2.0)
    assert row["tcc_equals_exact_count"] is False and row["ledger_equals_exact_count"] is False
    assert row["p_at_10"] == pytest.approx(0.3) and row["p_at_10_sd"] == pytest.approx(0.1 * math.sqrt(2))
    assert row["peaked_at_last_epoch"] == 2
    assert row["positives_sent_per_epoch"] == pytest.approx(5.8) and row["bytes_per_epoch"] == pytest.approx(1020.0)
    assert (row["clients_per_round"], row["T"], row["rpe"]) == (3, 7, 2)


def test_fpl_tcc_lowest_note_weighs_the_gap_against_the_larger_sd():
    """Mutant: ``lowest_tcc_note`` judging the gap against the smaller sd over seeds (``min``).
    By hand: pFPL 100 +- 5, sFPL 108 +- 10: the gap 8 exceeds 5 but not 10, no clear ordering."""
    from fedsim.experiment import load_scenario

    note = load_scenario("fpl_tcc").lowest_tcc_note([
        {"preset": "sFPL", "tcc": 108.0, "tcc_sd": 10.0, "p_at_10": 0.2},
        {"preset": "pFPL", "tcc": 100.0, "tcc_sd": 5.0, "p_at_10": 0.1}])
    assert note.startswith("Lowest mean TCC to the best P@10 among the 2 presets run: **pFPL** (100 ± 5 vectors, "
                           "P@10 0.1000; mean ± sd over seeds), next sFPL (108 ± 10 vectors, P@10 0.2000) (the gap, 8, "
                           "is within an sd over seeds: not a clear ordering).")


def test_fpl_table2_table4_by_hand():
    """Mutants of ``fpl_table2.table4``: the TCC summed over epochs 2 to ep + 1 (not the first
    ep); the bytes of the whole run, not up to the chosen epoch; the note's largest |difference|
    from the closed form read without the absolute value.

    By hand (the study of :func:`_tcc_study`, both seeds confirmed): seed 0 to epoch 2: TCC 210,
    closed form 200 (+5 %), 2100 bytes, 20 messages; seed 1 to epoch 3: TCC 300 against the exact
    count 301, closed form 360 (-16.6667 %), 3000 bytes."""
    from fedsim.experiment import load_scenario

    st = _tcc_study()
    st.confirmed = {("pFPL", s): r for s, r in st.recs.items()}
    st.chosen = {"pFPL": {s: SimpleNamespace(what={"epoch": c["epoch"], "pi": 0.5}, entry={"test_p": c["test_p"]})
                          for s, c in st.choice.items()}}
    tables, notes = {}, []
    ctx = SimpleNamespace(table=lambda name, rows, **kw: tables.setdefault(name, rows), note=notes.append)
    load_scenario("fpl_table2").table4(ctx, st)
    got = [(r["seed"], r["epochs"], r["tcc_ledger"], r["tcc_exact_count"], r["ledger_equals_exact"], r["tcc_formula"],
            r["bytes"], r["messages"]) for r in tables["table4"]]
    assert got == [(0, 2, 210.0, 210.0, True, 200.0, 2100, 20), (1, 3, 300.0, 301.0, False, 360.0, 3000, 30)]
    assert [r["diff_pct"] for r in tables["table4"]] == pytest.approx([5.0, 100 * (300 / 360 - 1)])
    assert notes == ["**Table 4 from the ledger:** every TCC DOES NOT equal the exact count visits x (|I| + T) + "
                     "positives sent; the largest |difference| from the closed form (its expectation over the "
                     "Bernoulli(pi) draws) is 16.6667 %."]


def test_fpl_tcc_best_rows_by_hand():
    """Mutant of ``fpl_tcc.best_rows`` (the ``best`` table and the lowest-TCC note): the mean TCC
    of the first seed alone. By hand (:func:`_tcc_study`, pFPL chosen at pi 0.5 in both seeds):
    TCC 210 (seed 0, epoch 2) and 300 (seed 1, epoch 3) -> 255, sd 45 sqrt(2); P@10 0.3."""
    from fedsim.experiment import load_scenario

    st = _tcc_study()
    st.chosen = {"pFPL": {s: SimpleNamespace(what={"pi": 0.5}, entry={"test_p": c["test_p"], "epoch": c["epoch"]})
                          for s, c in st.choice.items()}}
    (row,) = load_scenario("fpl_tcc").best_rows(st)
    assert (row["preset"], row["pi (per seed)"], row["epochs (per seed)"]) == ("pFPL", "0.5,0.5", "2,3")
    assert row["tcc"] == pytest.approx(255.0) and row["tcc_sd"] == pytest.approx(45 * math.sqrt(2))
    assert row["p_at_10"] == pytest.approx(0.3)


# ---------------------------------------------------------------------------------------------
# scenario personalfr_compression: the communication and computation ratios


def _compression_runs(pf_down: float, pf_up: float):
    """One seed at M = 4 on 40 items: FedAvg 1000 B down and 1000 B up per selected client and
    round, 8 GFLOP; PersonalFR ``pf_down`` / ``pf_up`` B, an upload of 35594 floats (the decoder
    with 10 active items: 128 x 256 + 256 + 257 x 10), 80 B of indices, 4 GFLOP with the dense
    encoder and 2 with the cut one."""
    fa = {"M": 4, "clients_per_round": 2, "client_flops": 8e9,
          "comm": {"down_bytes_per_client": 1000.0, "up_bytes_per_client": 1000.0, "up_floats_per_client": 86696.0,
                   "setup_bytes": 0}}
    pf_comm = {"down_bytes_per_client": pf_down, "up_bytes_per_client": pf_up, "up_floats_per_client": 35594.0,
               "setup_bytes": 80}
    return {("fedavg", "dense"): fa, ("personalfr", "dense"): {"M": 4, "client_flops": 4e9, "comm": pf_comm},
            ("personalfr", "cut"): {"M": 4, "client_flops": 2e9, "comm": pf_comm}}


def test_personalfr_compression_ratios_by_hand():
    """Mutants of ``personalfr_compression.seed_row`` / ``mean_rows``: the communication ratio over
    PersonalFR's upload alone; the formula ratio with the decoder for the whole model; the active
    items solved with 256 floats an item (the bias forgotten); the indices bytes not per client;
    the computation ratio inverted; the ratios' std with ddof 1 (the table says population);
    the first seed's figure for the mean.

    By hand, 40 items, model [40, 256, 128] / [128, 256, 40]: 40 x 256 + 256 + 256 x 128 + 128 =
    43392 encoder and 128 x 256 + 256 + 256 x 40 + 40 = 43304 decoder parameters (checked against
    the autoencoder's own count); PersonalFR uploads 35594 floats -> (35594 - 33024) / 257 = 10
    active items; bytes 2000 / 500 -> 4 (seed 1) and 2000 / 1000 -> 2 (seed 2): mean 3,
    population std 1; FLOPs 8 / 4 = 2 (dense) and 8 / 2 = 4 (cut); indices 80 B / 4 clients."""
    from fedsim.experiment import load_scenario
    from fedsim.math import autoencoder as ae

    whole, dec = 43392 + 43304, 43304
    model = ae.init_params(40, np.random.default_rng(0), (256, 128))
    assert (ae.param_count(model), ae.param_count(ae.decoder_of(model))) == (whole, dec)
    mod = load_scenario("personalfr_compression")
    r1 = mod.seed_row(1, _compression_runs(300.0, 200.0), 30, 40, whole, dec)
    assert r1 == pytest.approx({
        "clients": 4, "seed": 1, "users_per_client": 7.5, "selected_per_round": 2,
        "fedavg_bytes_per_client": 2000.0, "personalfr_bytes_per_client": 500.0, "comm_ratio": 4.0,
        "formula_ratio": whole / 35594, "formula_2D_over_Dactive": 2 * dec / 35594, "mean_active_items": 10.0,
        "indices_bytes_per_client": 20.0, "comp_ratio_dense": 2.0, "comp_ratio_cut": 4.0})
    r2 = mod.seed_row(2, _compression_runs(600.0, 400.0), 30, 40, whole, dec)
    (row,) = mod.mean_rows([r1, r2])
    assert row["comm_ratio"] == pytest.approx(3.0) and row["comm_ratio_std"] == pytest.approx(1.0)
    assert row["personalfr_bytes_per_client"] == pytest.approx(750.0) and row["repeats"] == 2
    assert row["comp_ratio_cut"] == 4.0 and row["comp_ratio_cut_std"] == 0.0


def test_fpl_table2_significance_difference_is_method_minus_reference(tmp_path, monkeypatch):
    """Mutant of the fpl_table2 scenario: the significance table's ``difference`` column
    written reference - method (its title: method - reference). Checked against the per-user
    vectors each comparison was handed, by a plain mean over the users defined in both."""
    import csv

    from fedsim.experiment import run_scenario
    from fedsim.studies.fpl import analysis

    seen = {}
    real = analysis.compare_users

    def spy(a_name, b_name, metric, a, b):
        seen[(a_name, b_name, metric)] = (np.array(a, dtype=np.float64), np.array(b, dtype=np.float64))
        return real(a_name, b_name, metric, a, b)

    monkeypatch.setattr(analysis, "compare_users", spy)
    out = tmp_path / "t2"
    run_scenario("fpl_table2", data="tiny", out=out, seed=1, profile="lan", quiet=True,
                 overrides={"pis": [1.0], "max_users": 30, "min_interactions": 8, "workers": 1, "epochs": [1],
                            "bpr_epochs": 2, "seeds": 1, "methods": ["Random", "Top-Pop", "BPR-MF"]})
    with open(out / "significance.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    key = {"P": "p", "R": "r", "NDCG": "ndcg"}
    assert len(rows) == 3 * 2 * 2  # (3 methods x 2 references - 2 self-comparisons) x 3 metrics
    signs = set()
    for r in rows:
        a, b = seen[(r["method"], r["against"], key[r["metric"]])]
        d = [x - y for x, y in zip(a.tolist(), b.tolist()) if not (math.isnan(x) or math.isnan(y))]
        assert float(r["difference"]) == pytest.approx(sum(d) / len(d), abs=1e-12), r
        assert float(r["95% CI low"]) <= float(r["difference"]) <= float(r["95% CI high"])
        signs.add(np.sign(sum(d)))
    assert {-1.0, 1.0} <= signs  # (the case has differences of both signs)


# ---------------------------------------------------------------------------------------------
# scenario fedrecpp_table3: Table 3's rows from the draws


def test_fedrecpp_table3_rows_from_two_draws_by_hand():
    """Mutants of ``fedrecpp_table3.cost_tables``: the difference from the paper taken paper /
    ours; a role's units the first draw's, not the mean over the draws; the download bytes the
    last draw's; the spread over the draws with ddof 1 (the docs: population); every draw of a
    role counted as incomplete.

    By hand, eta = 1 among 8 clients, two draws: denoiser 10 and 14 vectors (800 and 1120 B) an
    iteration -> 12, std 2, bytes 960; ordinary 4 and 6 -> 5, std 1; all clients 5 and 7 -> 6;
    download 40 vectors (1000 and 1200 B) -> 40, std 0, 1100 B; the second draw lost a client
    (incomplete: 1 of 2); the wan run took 2.5 s an iteration."""
    from fedsim.experiment import load_scenario
    from fedsim.studies.fedrecpp import PPOutcome
    from fedsim.studies.paper_values import FEDRECPP_TABLE3_ML100K

    def costs(den, ordi, cli):
        return [{"role": r, "nodes": k, "units_per_iteration": u, "bytes_per_iteration": 80.0 * u}
                for r, k, u in (("denoiser", 1, den), ("ordinary", 7, ordi), ("client", 8, cli))]

    outs = [PPOutcome(0, None, 0.7, 0.9, None, 1.0, costs=costs(10.0, 4.0, 5.0), download_bytes=1000.0,
                      download_units=40.0, iterations=2),
            PPOutcome(0, None, 0.7, 0.9, None, 1.0, costs=costs(14.0, 6.0, 7.0), download_bytes=1200.0,
                      download_units=40.0, iterations=2, lost_clients=[3]),
            PPOutcome(0, None, 0.7, 0.9, None, 1.0, round_s=2.5, iterations=3)]
    labels = [("1", 1, "cost", 0), ("1", 1, "cost", 1), ("1", 1, "wan", 0)]
    rows, per_draw, timing = load_scenario("fedrecpp_table3").cost_tables(
        labels, outs, etas=["1"], n=8, dataset="tiny", seed=5, paper_rho=True)
    by = {r["role"]: r for r in rows}
    assert list(by) == ["denoiser", "ordinary", "client", "download_V (not counted)"]
    d = by["denoiser"]
    assert (d["units_per_iteration"], d["units_std_over_draws"], d["units_min"], d["units_max"]) == (12.0, 2.0, 10.0, 14.0)
    assert d["bytes_per_iteration"] == 960.0 and d["incomplete_draws"] == 1 and d["diverged_draws"] == 0
    paper = dict(zip(("denoiser", "ordinary", "client"), FEDRECPP_TABLE3_ML100K["1"]))
    assert d["paper_units"] == paper["denoiser"] and d["diff_pct"] == pytest.approx(100 * (12.0 / paper["denoiser"] - 1))
    assert (by["ordinary"]["units_per_iteration"], by["ordinary"]["units_std_over_draws"]) == (5.0, 1.0)
    assert by["client"]["units_per_iteration"] == 6.0 and by["client"]["nodes"] == 8
    dl = by["download_V (not counted)"]
    assert (dl["units_per_iteration"], dl["units_std_over_draws"], dl["bytes_per_iteration"]) == (40.0, 0.0, 1100.0)
    assert (dl["incomplete_draws"], dl["nodes"]) == (1, 8)
    assert [(r["seed"], r["role"]) for r in per_draw][:3] == [(5, "denoiser"), (5, "ordinary"), (5, "client")]
    assert [(t["seconds_per_iteration"], t["iterations"]) for t in timing] == [(2.5, 3)]


def test_user_knn_claim_with_a_baseline_level_with_it_names_no_other_highest(monkeypatch):
    """Top-Pop and User-kNN with the same mean P@10 (0.10; Top-Pop comes first in the pool): the
    evidence said "Top-Pop has the highest P@10 (0.1000, User-kNN 0.1000)" and the test ran Top-Pop
    against User-kNN as the stronger one. Level means are a tie for the highest, and the verdict
    rests on the test (here p = 1: not distinguishable)."""
    from fedsim.studies.fpl import analysis

    seen: list = []
    _stub_compare(monkeypatch, {("User-kNN", "Top-Pop"): (1.0, 0.0), ("Top-Pop", "User-kNN"): (1.0, 0.0)}, seen)
    st = _study({"Random": 0.01, "Top-Pop": 0.10, "User-kNN": 0.10, "BPR-MF": 0.05})
    row = {r["claim"]: r for r in analysis.verdicts(st)}[USER_KNN_CLAIM]
    assert seen == [("User-kNN", "Top-Pop")]
    assert row["verdict"] == "not distinguishable on this data"
    assert row["evidence"].startswith("User-kNN ties for the highest P@10 (0.1000) with Top-Pop; against Top-Pop, "
                                      "User-kNN - Top-Pop")
    assert "has the highest" not in row["evidence"]
