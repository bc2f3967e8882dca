"""The prose notes the scenarios write into report.md state what the run computed: a sentence that
states a finding ("bounded by", "removes that cost", "the lowest") holds for the run's own figures,
or says what it compared; each test builds a tiny run where the old fixed sentence was false."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from fedsim.experiment import human_seconds, run_scenario


def _run(tmp_path, name, overrides, *, profile="lan", data="tiny"):
    out = tmp_path / name
    run_scenario(name, data=data, out=out, overrides=overrides, seed=1, profile=profile, quiet=True)
    return out, (out / "report.md").read_text()


def _csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_fault_study_does_not_claim_the_deadline_bounds_the_round(tmp_path):
    # a 10 ms deadline on wan: the round also carries the model's transfer and the evaluation's wait,
    # so it lasts longer than the deadline; the note said "the round time is bounded by it"
    out, report = _run(tmp_path, "fault_study", {"rounds": 2, "losses": [0.0], "dropouts": [0.0], "window": 0.05,
                                                 "workers": 1, "deadline": 0.01, "protocols": ["fedrec"]},
                       profile="wan")
    rows = _csv(out / "faults_fedrec.csv")
    assert len(rows) == 1 and float(rows[0]["round_s"]) > 0.01
    assert "bounded by it" not in report
    longest = max(float(r["round_s"]) for r in rows)
    assert (f"round_s exceeds the deadline in 1 of the 1 run(s) here (longest mean round {human_seconds(longest)}, "
            f"deadline 10 ms, {human_seconds(longest - 0.01)} beyond it)") in report
    assert "(deadline 10 ms, wan profile)" in report


def test_fault_study_gives_long_rounds_in_minutes_and_what_the_rounding_hides(tmp_path):
    # a 1234 s deadline that half the clients (gone at once) make the server wait out: the note said
    # "longest mean round 1.23e+03 s, deadline 1234 s" of a round that exceeds the deadline, and the
    # title "deadline 1234 s" above a table that reads 20 min 34 s
    out, report = _run(tmp_path, "fault_study", {"rounds": 2, "losses": [0.0], "dropouts": [0.5], "window": 0.01,
                                                 "workers": 1, "deadline": 1234.0, "protocols": ["fedrec"]},
                       profile="wan")
    (row,) = _csv(out / "faults_fedrec.csv")
    over = float(row["round_s"]) - 1234.0
    assert 0.001 < over < 0.1, row["round_s"]  # the evaluation's exchange after the wait
    assert ("round_s exceeds the deadline in 1 of the 1 run(s) here (longest mean round 20 min 34 s, deadline "
            f"20 min 34 s, {human_seconds(over)} beyond it)") in report
    assert "## fedrec: accuracy, round time and losses against loss and dropout (deadline 20 min 34 s, wan profile)" \
        in report
    assert "e+0" not in report


def test_fault_study_does_not_count_float_noise_as_a_round_beyond_the_deadline(tmp_path):
    # on the ideal profile a round that waits out the deadline (half the clients gone at 0 s) lasts
    # it exactly, but the mean of three 0.1 s rounds is 0.10000000000000002 s: the note said every
    # run exceeded the deadline, by "1.39e-11 µs"
    out, report = _run(tmp_path, "fault_study", {"rounds": 3, "losses": [0.0], "dropouts": [0.5], "window": 0.0,
                                                 "workers": 1, "deadline": 0.1, "protocols": ["fedrec"]},
                       profile="ideal")
    (row,) = _csv(out / "faults_fedrec.csv")
    assert float(row["round_s"]) == 0.10000000000000002
    assert ("round_s exceeds the deadline in 0 of the 1 run(s) here (longest mean round 100 ms, deadline 100 ms). "
            in report)


def test_fault_study_without_a_deadline_says_so(tmp_path):
    # --set deadline=none (FedRecConfig's deadline takes none) on a network that loses nothing: the
    # table title and the note formatted None as a number, a TypeError traceback and no folder
    out, report = _run(tmp_path, "fault_study", {"rounds": 1, "losses": [0.0], "dropouts": [0.0], "deadline": None,
                                                 "workers": 1, "protocols": ["fedrec"]}, profile="wan")
    (row,) = _csv(out / "faults_fedrec.csv")
    assert float(row["round_s"]) > 0
    assert row["deadline_s"] == ""  # a missing value, as CSV readers take one (it was the text "None")
    assert "## fedrec: accuracy, round time and losses against loss and dropout (no deadline, wan profile)" in report
    assert ("There is no deadline here: the server waits for every round's messages, and a lost one would stop the "
            "run. FedRec's RMSE and FPL's P@10 are over the clients present at the end") in report


def test_fault_study_says_fpl_leaves_out_the_clients_gone(tmp_path):
    # FPL's evaluation leaves out a client that dropped out (its p_u left with it); the note said it
    # ranked every user, "zeros for the clients gone"
    out, report = _run(tmp_path, "fault_study", {"rounds": 2, "losses": [0.0], "dropouts": [0.5], "window": 0.05,
                                                 "workers": 1, "protocols": ["fpl"]})
    assert int(_csv(out / "faults_fpl.csv")[0]["lost_clients"]) > 0
    assert "zeros for the clients gone" not in report and "ranks every user" not in report
    assert "FedRec's RMSE and FPL's P@10 are over the clients present at the end" in report


def test_quickstart_note_states_the_comparisons_the_run_computed(tmp_path):
    # on tiny data at T = 15 hybrid filling comes out MORE accurate than rho = 0; the fixed note said
    # it costs a little accuracy and FedRec++ removes that cost, and that paper values were printed
    out, report = _run(tmp_path, "quickstart", {"iterations": 15})
    acc = {r["run"]: float(r["rmse"]) for r in _csv(out / "accuracy.csv")}
    unfed, rho0, hf, pp = (acc[k] for k in ("unfederated", "FedRec rho=0", "FedRec HF rho=1", "FedRec++ eta=1 rho=1"))
    assert hf < rho0 - 1e-4 and abs(rho0 - unfed) <= 1e-4 and abs(pp - rho0) <= 1e-4
    assert "at a small cost in accuracy" not in report and "removes that cost" not in report
    assert (f"Test RMSE: FedRec with rho = 0 {rho0:.4f} equals the unfederated model's {unfed:.4f} (to 0.0001; the "
            f"federation is lossless); hybrid filling at rho = 1, which uploads gradients for sampled unrated items "
            f"beside the rated ones, {hf:.4f}, {hf - rho0:+.4f} against rho = 0 (more accurate than rho = 0 in this "
            f"run); FedRec++ with one denoiser {pp:.4f}, {pp - rho0:+.4f} against rho = 0: it equals FedRec at "
            "rho = 0 (to 0.0001).") in report
    # quickstart prints no published figure: the data note does not speak of paper values beside ours
    assert "not the shape of any dataset of the papers." in report
    assert "paper values printed beside ours" not in report


def test_quickstart_says_which_runs_diverged_instead_of_a_traceback(tmp_path):
    # lr = 1e23 (finite: the parameter's bounds take it): the unfederated model's evaluate raised
    # DivergenceError, a traceback of the scenario with no output
    import json

    out, report = _run(tmp_path, "quickstart", {"iterations": 2, "lr": 1e23})
    rows = _csv(out / "accuracy.csv")
    assert [r["run"] for r in rows] == ["unfederated", "FedRec rho=0", "FedRec HF rho=1", "FedRec++ eta=1 rho=1"]
    assert all(r["mae"] == r["rmse"] == "" for r in rows)  # (NaN: an empty cell)
    assert ("**Diverged.** unfederated at iteration 2, FedRec rho=0 at iteration 2, FedRec HF rho=1 at iteration 2, "
            "FedRec++ eta=1 rho=1 at iteration 2: the model was not finite there; its NaN MAE and RMSE are no "
            "score.") in report
    assert "Test RMSE:" not in report  # no comparison of NaN figures
    assert json.loads((out / "results.json").read_text())["caveats"] == ["diverged"]


FPL_TINY = {"pis": [1.0], "max_users": 30, "min_interactions": 8, "workers": 1}


def test_fpl_tcc_names_no_lowest_of_one_preset_nor_compares_it_with_the_papers(tmp_path):
    # one preset run: the note called it the lowest TCC and set it beside "the paper finds pFPL+"
    out, report = _run(tmp_path, "fpl_tcc", {**FPL_TINY, "epochs": [1], "presets": ["pFPL"], "seeds": 1})
    best = _csv(out / "best.csv")
    assert [r["preset"] for r in best] == ["pFPL"]
    assert "Lowest TCC" not in report and "The paper finds pFPL+" not in report
    assert float(best[0]["tcc"]).is_integer()  # one seed: a count, in full (it was .4g: 1.26e+04)
    assert (f"TCC to the best P@10: **pFPL** {float(best[0]['tcc']):,.0f} vectors, P@10 {float(best[0]['p_at_10']):.4f} "
            "(mean over seeds); the only preset run, so no lowest. The paper's lowest is pFPL+ on Brazil (Table 4, "
            "among its four presets); not all four ran here, so the two are not compared.") in report


def test_fpl_tcc_lowest_says_when_the_gap_is_within_the_seed_spread(tmp_path):
    out, report = _run(tmp_path, "fpl_tcc", {**FPL_TINY, "epochs": [2], "seeds": 2})
    best = sorted(_csv(out / "best.csv"), key=lambda r: float(r["tcc"]))
    assert len(best) == 4
    low, nxt = best[0], best[1]
    gap = float(nxt["tcc"]) - float(low["tcc"])
    # this run's two lowest are closer than their spread over the seeds: no clear ordering
    assert gap <= max(float(low["tcc_sd"]), float(nxt["tcc_sd"]))
    # in full, with thousands separators (it was .4g: "1.26e+04 ± 0 vectors", "1.304e+04 ± 6148")
    def count(x):
        return f"{x:,.0f}" if x.is_integer() else f"{x:,.1f}"

    assert (f"Lowest mean TCC to the best P@10 among the 4 presets run: **{low['preset']}** "
            f"({count(float(low['tcc']))} ± {count(float(low['tcc_sd']))} vectors") in report
    assert f"(the gap, {count(gap)}, is within an sd over seeds: not a clear ordering)." in report
    assert "e+0" not in report
    assert ("The paper's lowest (Table 4, Brazil) is pFPL+: "
            + ("the same preset." if low["preset"] == "pFPL+" else "a different preset from ours.")) in report


def test_fpl_table2_counts_no_untested_comparison_as_a_t_test(tmp_path):
    # 4 users: every per-user comparison is below MIN_USERS and runs no test (NaN p); the notes
    # counted them as "t-tests" with 0 significant, listed every method as "cannot be told apart
    # from Top-Pop" and called cornac's BPR "within noise" of fedsim's
    out, report = _run(tmp_path, "fpl_table2", {**FPL_TINY, "epochs": [1], "bpr_epochs": 2, "max_users": 5, "seeds": 1,
                                                "methods": ["Random", "Top-Pop", "BPR-MF", "BPR-MF (cornac)", "sFPL"]})
    sig = _csv(out / "significance.csv")
    assert sig and all(r["significant (Holm, 0.05)"].startswith("no test (") for r in sig)
    assert all(r["t-test p"] == r["Holm p"] == "nan" for r in sig)  # no member of the Holm family
    assert (f"Of the {len(sig)} comparisons in the significance table, 0 could be tested (at least 6 users with "
            f"held-out items; the other {len(sig)} have no p-value)") in report
    assert "cannot be told apart from Top-Pop" not in report
    assert ("**Against Top-Pop (per-user paired t-test on P@10; Holm's correction over the 0 tested method(s), "
            "significant at Holm p < 0.05):** not tested (fewer than 6 users with held-out items): Random, BPR-MF, "
            "BPR-MF (cornac), sFPL. ") in report
    assert "None of the 0 tested" not in report
    if "Independent check of BPR-MF" in report:  # cornac installed
        assert "over 4 user(s): too few for a test (at least 6).\n" in report
        assert "within noise" not in report


def test_personalfr_comm_table_is_the_mean_over_the_repeats(tmp_path):
    # the table was the first repeat's alone, its title saying nothing of it; which clients a round
    # selects (and so PersonalFR's active items and bytes) varies with the seed
    from fedsim.experiment.context import RunContext
    from fedsim.studies.personalfr import result_tables

    def run(seed, up, flops):
        return {"task": "explicit", "method": "personalfr", "M": 4, "n_users": 30, "n_items": 40, "seed": seed,
                "validation": False, "rounds": 2, "best": 1.0, "final": 1.0, "best_round": 2, "wall_s": 0.1,
                "history": [{"round": 2, "rmse": 1.0}], "clients_per_round": 1, "client_flops": flops,
                "comm": {"bytes_per_round": 2.0 * up, "down_bytes_per_client": up, "up_bytes_per_client": up,
                         "setup_bytes": 640}}

    ctx = RunContext("t", {}, "tiny", 1, None, tmp_path, quiet=True)
    result_tables(ctx, [run(1, 100.0, 4e9), run(2, 300.0, 8e9)], title="t")
    (comm,) = [t for t in ctx.tables if t.name == "results_comm"]
    assert comm.title.endswith("client computation per round (FLOPs charged), mean over the repeats")
    assert comm.rows == [{"task": "explicit", "clients": "4", "method": "personalfr", "clients_per_round": 1.0,
                          "bytes_per_round": 400.0, "down_bytes_per_client": 200.0, "up_bytes_per_client": 200.0,
                          "setup_bytes": 640.0, "client_gflop_per_round": 3.0, "repeats": 2}]


def test_personalfr_checks_do_not_order_equal_or_noisy_figures(tmp_path):
    from fedsim.experiment.context import RunContext
    from fedsim.studies.personalfr import verdicts

    def row(method, clients, sel, sd):
        return {"task": "explicit", "method": method, "clients": clients, "selected": sel, "selected_std": sd}

    ctx = RunContext("t", {}, "tiny", 1, None, tmp_path, quiet=True)
    verdicts(ctx, [row("fedavg", "100", 0.9, 0.01), row("personalfr", "100", 0.9, 0.01),  # equal: was "FedAvg better"
                   row("fedavg", "300", 0.90, 0.02), row("personalfr", "300", 0.89, 0.03),  # gap 0.01 < sd 0.03
                   row("fedavg", "all", 0.95, 0.001), row("personalfr", "all", 0.90, 0.001)])
    assert ctx.notes == ["Checks (the selected evaluations):\n\n"
                         "- explicit, M = 100: PersonalFR 0.9000 vs FedAvg 0.9000: equal\n"
                         "- explicit, M = 300: PersonalFR 0.8900 vs FedAvg 0.9000: PersonalFR better (the gap is "
                         "within a population std over the repeats: not a clear ordering)\n"
                         "- explicit, M = all: PersonalFR 0.9000 vs FedAvg 0.9500: PersonalFR better"]


def test_personalfr_compression_names_no_computed_column_as_a_published_figure(tmp_path):
    # its paper_formula_2D_over_Dactive column is the paper's formula computed on the run: named
    # paper_*, it made the report say "the paper_* columns are the published figures ..."
    out = tmp_path / "c"
    run_scenario("personalfr_compression", data="tiny", out=out, quiet=True,
                 overrides={"clients": [1, 2], "rounds": 1, "repeats": 1, "workers": 1})
    with open(out / "compression.csv", newline="") as fh:
        cols = next(csv.reader(fh))
    assert "formula_2D_over_Dactive" in cols and not any(c.startswith("paper") for c in cols)
    assert "the paper_* columns are the published figures" not in (out / "report.md").read_text()


def _fig3_means(out):
    rows = _csv(out / "ic_vs_p.csv")
    return {p: sum(float(r["IC@10"]) for r in rows if r["preset"] == p) / len([r for r in rows if r["preset"] == p])
            for p in {r["preset"] for r in rows}}


def test_fpl_fig3_orders_no_presets_from_one_seed_nor_says_how_one_pi_moves_them(tmp_path):
    # one seed and one pi: the note said "sFPL+ lies NOT right of sFPL (23.0 vs 23.0); pi moves its IC@10
    # NOT more (0.0 vs 0.0)": an ordering with no spread to judge it by, a movement over pi never run
    out, report = _run(tmp_path, "fpl_fig3", {**FPL_TINY, "pis": [0.5], "epochs": [1], "seeds": 1})
    m = _fig3_means(out)
    for plus, plain in (("sFPL+", "sFPL"), ("pFPL+", "pFPL")):
        where = "level with" if m[plus] == m[plain] else "right of" if m[plus] > m[plain] else "NOT right of"
        assert (f"- {plus} lies {where} {plain} (mean IC@10 {m[plus]:.1f} vs {m[plain]:.1f}; one seed: no spread to "
                "judge the gap by); one pi ran: nothing to say about how far pi moves IC@10") in report
    assert "moves its IC@10" not in report


def test_fpl_fig3_weighs_the_ordering_against_the_seed_spread(tmp_path):
    out, report = _run(tmp_path, "fpl_fig3", {**FPL_TINY, "pis": [0.5, 1.0], "epochs": [1], "seeds": 2})
    rows = _csv(out / "ic_vs_p.csv")
    m = _fig3_means(out)
    for plus, plain in (("sFPL+", "sFPL"), ("pFPL+", "pFPL")):
        gap = abs(m[plus] - m[plain])
        sd = max(float(r["IC@10 sd"]) for r in rows if r["preset"] in (plus, plain))
        verdict = ("exceeds the largest IC@10 sd over seeds of either" if gap > sd
                   else "is within an IC@10 sd over seeds: not a clear ordering")
        assert f"(mean IC@10 {m[plus]:.1f} vs {m[plain]:.1f}; the gap, {gap:.1f}, {verdict}); pi moves" in report


def test_personalfr_checks_say_one_repeat_has_no_spread_to_judge_an_ordering_by(tmp_path):
    # repeats=1: every std is NaN, and the note said "FedAvg better" as a finding from one run
    out, report = _run(tmp_path, "personalfr_table3", {"clients": [4], "rounds": 1, "eval_every": 1,
                                                       "tasks": ["explicit"], "repeats": 1, "workers": 1})
    rows = {r["method"]: r for r in _csv(out / "results.csv") if r["clients"] == "4"}
    fa, pf = float(rows["fedavg"]["selected"]), float(rows["personalfr"]["selected"])
    assert rows["fedavg"]["selected_std"] == rows["personalfr"]["selected_std"] == "" and fa != pf  # NaN: blank
    winner = "PersonalFR" if pf < fa else "FedAvg"
    assert (f"- explicit, M = 4: PersonalFR {pf:.4f} vs FedAvg {fa:.4f}: {winner} better (one repeat: no spread to "
            "judge the gap by); Joint") in report


def test_fpl_fig3_claims_no_ordering_when_either_presets_sd_is_nan():
    # max(sd_plus, sd_plain) with sd_plain NaN gave sd_plus (max keeps its first argument against a
    # NaN): a gap larger than sd_plus was said to exceed "the largest IC@10 sd over seeds of either"
    # though the plain preset's spread was unknown; with the NaN first it said "not a clear ordering"
    from fedsim.experiment import load_scenario

    gap_spread = load_scenario("fpl_fig3").gap_spread
    nan = float("nan")
    within = "the gap, 5.0, is within an IC@10 sd over seeds: not a clear ordering"
    assert gap_spread(5.0, (1.0, nan), 2) == gap_spread(5.0, (nan, 1.0), 2) == within
    assert gap_spread(-5.0, (1.0, 2.0), 2) == "the gap, 5.0, exceeds the largest IC@10 sd over seeds of either"
    assert gap_spread(1.5, (1.0, 2.0), 2) == "the gap, 1.5, is within an IC@10 sd over seeds: not a clear ordering"
    assert gap_spread(5.0, (nan, nan), 1) == "one seed: no spread to judge the gap by"


def test_personalfr_checks_claim_no_ordering_when_one_methods_spread_is_unknown():
    # the spreads were filtered for NaN: with FedAvg's std NaN (one finite repeat) the gap was
    # judged against PersonalFR's alone, and a gap larger than it stated as an ordering
    from fedsim.studies.personalfr.report import verdicts

    class Ctx:
        notes: list = []

        def note(self, text):
            self.notes.append(text)

    nan = float("nan")

    def line(fa_sd, pf_sd):
        ctx = Ctx()
        ctx.notes = []
        verdicts(ctx, [{"task": "explicit", "method": "fedavg", "clients": "4", "selected": 1.0, "selected_std": fa_sd},
                       {"task": "explicit", "method": "personalfr", "clients": "4", "selected": 0.9,
                        "selected_std": pf_sd}])
        return ctx.notes[0].splitlines()[-1]

    head = "- explicit, M = 4: PersonalFR 0.9000 vs FedAvg 1.0000: PersonalFR better"
    assert line(nan, 0.01) == line(0.01, nan) == head + " (one of them has no spread over its repeats: not a clear ordering)"
    assert line(nan, nan) == head + " (one repeat: no spread to judge the gap by)"
    assert line(0.01, 0.02) == head
    assert line(0.01, 0.2) == head + " (the gap is within a population std over the repeats: not a clear ordering)"


def test_personalfr_checks_weigh_joint_against_the_spread_too():
    # implicit, selected NDCG@10: Joint 0.4916 +- 0.0223 against FedAvg 0.4939 +- 0.0437 (a tiny run):
    # the note said "Joint 0.4916 NOT at least as good as both" from the means alone, a gap of 0.0023
    # inside either spread, while the PersonalFR-FedAvg gap beside it was weighed
    from fedsim.studies.personalfr.report import verdicts

    class Ctx:
        def __init__(self):
            self.notes = []

        def note(self, text):
            self.notes.append(text)

    def line(joint, joint_sd, fa=(0.4939, 0.0437), pf=(0.4800, 0.0452)):
        ctx = Ctx()
        verdicts(ctx, [{"task": "implicit", "method": "joint", "clients": "1 (central)", "selected": joint,
                        "selected_std": joint_sd},
                       {"task": "implicit", "method": "fedavg", "clients": "4", "selected": fa[0], "selected_std": fa[1]},
                       {"task": "implicit", "method": "personalfr", "clients": "4", "selected": pf[0],
                        "selected_std": pf[1]}])
        return ctx.notes[0].splitlines()[-1]

    nan = float("nan")
    head = ("- implicit, M = 4: PersonalFR 0.4800 vs FedAvg 0.4939: FedAvg better (the gap is within a population "
            "std over the repeats: not a clear ordering); Joint ")
    assert line(0.4916, 0.0223) == head + ("0.4916 NOT at least as good as both (the gap is within a population std "
                                           "over the repeats: not a clear ordering)")
    assert line(0.3, 0.01) == head + "0.3000 NOT at least as good as both"  # 0.19 beyond every spread
    assert line(0.6, 0.01) == head + "0.6000 at least as good as both"
    assert line(0.4916, nan) == head + ("0.4916 NOT at least as good as both (one of them has no spread over its "
                                        "repeats: not a clear ordering)")
    # ahead of one by more than the spread, of the other within it: the clear one decides
    assert line(0.47, 0.001, fa=(0.60, 0.001), pf=(0.475, 0.01)).endswith("; Joint 0.4700 NOT at least as good as both")
    assert line(0.4916, nan, fa=(0.4939, nan), pf=(0.48, nan)).endswith(
        "0.4916 NOT at least as good as both (one repeat: no spread to judge the gap by)")


@pytest.mark.parametrize("seed, case", [(0, "within"), (1, "equal")])
def test_fpl_fig3_weighs_how_far_pi_moves_ic_against_the_seed_spread(tmp_path, seed, case):
    # two seeds, pi in {0.5, 1}: the note said "pi moves its IC@10 more (0.5 vs 0.0)" from the means
    # alone, with IC@10 sds of 0.7 over the seeds (seed 0); and "NOT more (0.0 vs 0.0)" for two equal
    # ranges (seed 1)
    out = tmp_path / "fig3"
    run_scenario("fpl_fig3", data="tiny", out=out, seed=seed, profile="lan", quiet=True,
                 overrides={**FPL_TINY, "pis": [0.5, 1.0], "epochs": [1], "seeds": 2})
    report = (out / "report.md").read_text()
    rows = _csv(out / "ic_vs_p.csv")
    seen = set()
    for plus, plain in (("sFPL+", "sFPL"), ("pFPL+", "pFPL")):
        ics = {p: [float(r["IC@10"]) for r in rows if r["preset"] == p] for p in (plus, plain)}
        r_plus, r_plain = (max(ics[p]) - min(ics[p]) for p in (plus, plain))
        sd = max(float(r["IC@10 sd"]) for r in rows if r["preset"] in (plus, plain))
        if r_plus == r_plain:
            expected = f"pi moves its IC@10 as much ({r_plus:.1f} vs {r_plain:.1f})"
            seen.add("equal")
        else:
            how = "more" if r_plus > r_plain else "NOT more"
            diff = abs(r_plus - r_plain)
            verdict = (f"the gap, {diff:.1f}, exceeds the largest IC@10 sd over seeds of either" if diff > sd
                       else f"the gap, {diff:.1f}, is within an IC@10 sd over seeds: not a clear ordering")
            expected = f"pi moves its IC@10 {how} ({r_plus:.1f} vs {r_plain:.1f}; {verdict})"
            seen.add("within" if diff <= sd else "beyond")
        assert expected + "\n" in report + "\n"
    assert case in seen  # the case this seed was picked for occurs in its run


def _spy_comparisons(monkeypatch) -> dict:
    """Every per-user comparison the FPL analysis makes from now on, by (a, b, metric); the key
    "all" holds them all in order."""
    from fedsim.studies.fpl import analysis

    seen = {"all": []}
    real = analysis.compare_users

    def spy(a_name, b_name, metric, a, b):
        seen[(a_name, b_name, metric)] = c = real(a_name, b_name, metric, a, b)
        seen["all"].append(c)
        return c

    monkeypatch.setattr(analysis, "compare_users", spy)
    return seen


@pytest.mark.parametrize("data, users", [("tiny", 30), ("ml100k-like", 40)])
def test_fpl_table2_top_pop_note_names_the_methods_significantly_below_it(tmp_path, monkeypatch, data, users):
    # the note listed the methods it could not tell from Top-Pop and those above it: the ones
    # significantly below (Random, and more on ml100k-like) were in no list; and each was called
    # significant at its raw p < 0.05, one test of several (on tiny: Random, p = 0.018 of 4 tests):
    # now at Holm's adjusted p over the note's family (each method against Top-Pop on P@10), both shown
    from fedsim.math.stats import holm
    from fedsim.studies.fpl.analysis import fmt_p

    seen = _spy_comparisons(monkeypatch)
    methods = ["Random", "Top-Pop", "BPR-MF", "sFPL", "pFPL"]
    out, report = _run(tmp_path, "fpl_table2", {**FPL_TINY, "max_users": users, "epochs": [1], "bpr_epochs": 2,
                                                "seeds": 2, "methods": methods}, data=data)
    vs = {m: seen[(m, "Top-Pop", "p")] for m in methods if m != "Top-Pop"}
    assert all(c.n >= 6 for c in vs.values())
    q = dict(zip(vs, holm([c.t.pvalue for c in vs.values()])))
    below = [m for m, c in vs.items() if q[m] < 0.05 and c.diff < 0]
    same = [m for m in vs if q[m] >= 0.05]
    assert not [m for m, c in vs.items() if q[m] < 0.05 and c.diff > 0]
    if data == "tiny":  # the case it was picked for: significant at the raw p alone
        assert [m for m in same if vs[m].t.pvalue < 0.05] == ["Random"]
    else:
        assert "Random" in below

    def named(ms):
        return ", ".join(f"{m} (p = {fmt_p(vs[m].t.pvalue)}, Holm p = {fmt_p(q[m])})" for m in ms)

    (note,) = [p for p in report.split("\n\n") if p.startswith("**Against Top-Pop")]
    assert note == (f"**Against Top-Pop (per-user paired t-test on P@10; Holm's correction over the {len(vs)} tested "
                    "method(s), significant at Holm p < 0.05):** "
                    + (f"cannot be told apart from Top-Pop on this data: {named(same)}. " if same else "")
                    + (f"significantly below Top-Pop: {named(below)}. " if below else "")
                    + f"None of the {len(vs)} tested method(s) is significantly above Top-Pop.")


def test_fpl_table2_significance_table_judges_at_holm_p_over_the_table(tmp_path, monkeypatch):
    # its "significant (t, 0.05)" column was each test's raw p < 0.05, over 2 references x 3 metrics
    # x every method; the family of Holm's correction is now the table's tests
    from fedsim.math.stats import holm
    from fedsim.studies.fpl.analysis import fmt_p

    seen = _spy_comparisons(monkeypatch)
    out, report = _run(tmp_path, "fpl_table2", {**FPL_TINY, "epochs": [1], "bpr_epochs": 2, "seeds": 2,
                                                "methods": ["Random", "Top-Pop", "BPR-MF", "sFPL", "pFPL"]})
    sig = _csv(out / "significance.csv")
    key = {"P": "p", "R": "r", "NDCG": "ndcg"}
    cs = [seen[(r["method"], r["against"], key[r["metric"]])] for r in sig]
    assert len(sig) == (5 * 2 - 2) * 3 and all(c.n >= 6 for c in cs)  # 5 methods x 2 references, less each reference against itself
    q = holm([c.t.pvalue for c in cs])
    for r, c, qi in zip(sig, cs, q):
        assert (r["t-test p"], r["Holm p"], r["significant (Holm, 0.05)"]) == (
            fmt_p(c.t.pvalue), fmt_p(qi), "yes" if qi < 0.05 else "no"), r
    raw, adj = sum(c.t.pvalue < 0.05 for c in cs), int((q < 0.05).sum())
    assert raw > adj  # the case this run was picked for: raw p < 0.05 that Holm does not keep
    assert (f"of those t-tests {raw} give p < 0.05 unadjusted and {adj} stay below it after Holm's correction over "
            "the table (its `significant` column).") in report
    assert f"Holm's correction over the {len(sig)} tests of this table, significant at Holm p < 0.05)" in report
    verdicts = _csv(out / "verdicts.csv")
    n = sum(1 for r in verdicts if r["p (Holm)"])
    assert f"significant at Holm p < 0.05, Holm's correction over the {n} tests of this table)" in report


def test_fault_study_says_personalfr_rounds_count_its_setup_round(tmp_path):
    # rounds=2: PersonalFR's row said rounds = 3 (its index-upload round 0 is in the ledger) and
    # round_s averaged over the three, with no word of it
    out, report = _run(tmp_path, "fault_study", {"rounds": 2, "losses": [0.0], "dropouts": [0.0], "window": 0.05,
                                                 "workers": 1, "protocols": ["personalfr"]})
    (row,) = _csv(out / "faults_personalfr.csv")
    assert row["rounds"] == "3"
    assert ("PersonalFR's `rounds` (3 here, for rounds=2) counts its setup round 0, the clients' index upload, "
            "beside its training rounds, and its round_s is the mean over all of them.") in report


def _ties(rows, group_cols, describe):
    """Per group, the chosen row and the other candidates with its MAE (none diverged)."""
    out = {}
    for r in rows:
        if r["chosen"] == "True":
            g = tuple(r[c] for c in group_cols)
            out[g] = (r, [describe(o) for o in rows if o is not r and tuple(o[c] for c in group_cols) == g
                          and not o["diverged_at"] and o["mae"] == r["mae"]])
    return out


def test_fedrec_table2_says_when_the_chosen_lambda_ties_with_others(tmp_path):
    # tiny data, T = 5: the three lambdas give the same validation MAE; the note said "Chosen lambda:
    # PMF(B) 0.1" as if 0.1 had scored best
    out, report = _run(tmp_path, "fedrec_table2", {"folds": 2, "iterations": 5, "workers": 1, "reference": "none",
                                                   "paper_order": False})
    ties = _ties(_csv(out / "lambda_selection.csv"), ["model"], lambda o: o["lambda"])
    # PMF(B) chose by score; PMF(S) and SVD++(S) did not learn in 5 iterations: every lambda ties
    assert [len(others) for _, others in ties.values()] == [0, 2, 2]
    parts = [f"{m} {float(r['lambda']):g}" + (f" ({len(others)} other candidate(s) tie with it on MAE: taken for its "
                                              "place in the listing, not its score)" if others else "")
             for (m,), (r, others) in ties.items()]
    assert "Chosen lambda: " + ", ".join(parts) + " (scored on a validation split" in report


def test_fedrec_table2_does_not_call_a_model_that_did_not_learn_lossless(tmp_path):
    # tiny data, T = 5: the models stay at their initial model, federated and unfederated alike,
    # so MD < STDR held trivially and md_below_stdr said True for them
    out, _ = _run(tmp_path, "fedrec_table2", {"folds": 2, "iterations": 5, "workers": 1, "reference": "none",
                                              "paper_order": False})
    stuck = {r["run"].split()[0] for r in _csv(out / "not_learned.csv")}
    assert {"PMF(S)", "SVD++(S)"} <= stuck
    md = {r["model"]: r for r in _csv(out / "md_stdr.csv")}
    assert set(md) == {"PMF(B)", "PMF(S)", "SVD++(S)"}
    for m, r in md.items():
        if m in stuck:
            assert r["md_below_stdr"] == "n/a: a run did not learn"
        else:  # the comparison, from the row's own figures
            below = float(r["mae_md_pct"]) < float(r["mae_stdr_pct"]) and float(r["rmse_md_pct"]) < float(r["rmse_stdr_pct"])
            assert r["md_below_stdr"] == str(below)


def test_hf_search_note_says_when_the_chosen_pair_ties_with_the_authors(tmp_path):
    # tiny data, T = 10: every (T_predict, T_local) with T_predict >= 10 gives the same MAE (HF never
    # predicts); the note set "chosen (10, 5)" beside "the authors' (10, 10)" as if they differed
    out, report = _run(tmp_path, "fedrec_rho", {"folds": 2, "iterations": 10, "workers": 1, "models": ["PMF(B)"],
                                                "rhos": [1], "strategies": ["hf"]})
    ties = _ties(_csv(out / "hf_search.csv"), ["model", "rho"], lambda o: f"({o['T_predict']}, {o['T_local']})")
    (r, others), = ties.values()
    assert "(10, 10)" in others
    assert (f"chosen on the validation split: PMF(B) {r['rho']}: ({r['T_predict']}, {r['T_local']}) ({len(others)} "
            "other candidate(s) tie with it on MAE, the authors' (10, 10) among them: taken for its place in the "
            f"listing, not its score); the authors' choices: PMF(B) {r['rho']}: (10, 10).") in report


def test_not_the_papers_setting_names_an_empty_default(tmp_path):
    # fpl_fig3's pis and epochs default to an empty list (the settings' values): the note printed
    # "pis=0.5,1.0 (default ), epochs=1 (default )", then "(default none)", and seeds "(default 0)":
    # placeholders for "the settings' value", which it names now (and pis equal to it are no change)
    out, report = _run(tmp_path, "fpl_fig3", {**FPL_TINY, "pis": [0.5, 1.0], "epochs": [1], "seeds": 1})
    assert "(default )" not in report and "(default none)" not in report and "(default 0)" not in report
    assert ("parameters changed: settings=quick (paper: paper), min_interactions=8 (default: the quick settings' 21 "
            "(users with more than 20 interactions)), seeds=1 (default: the quick settings' 2), epochs=1 (default: the "
            "quick settings' 8, 2, 8, 2), max_users=30 (default -1); synthetic data `tiny`)") in report


@pytest.mark.parametrize("name", ["fpl_table2", "fpl_fig3", "fpl_pi", "fpl_tcc"])
def test_the_fpl_scenarios_say_what_an_override_left_empty_stands_for(name, tmp_path):
    # fpl_table2 with --set settings=paper --set seeds=2 noted "seeds=2 (default 0)": 0 is no number
    # of seeds but "the settings' value", here the paper's 5
    from fedsim.experiment import RunContext, load_scenario, resolve_config

    mod = load_scenario(name)
    over = {"settings": "paper", "seeds": 2, "pis": [round(0.1 * k, 1) for k in range(1, 11)], "fcf_lr": 0.05,
            "epochs": [50]}  # (pis and epochs as the paper's: no change; fcf_lr where the scenario has it)
    config = resolve_config(mod, {k: v for k, v in over.items() if k in mod.PARAMS})
    ctx = RunContext(name=name, config=config, data="Milan.tsv", seed=0, net=None, out=tmp_path, quiet=True,
                     defaults={k: p.default for k, p in mod.PARAMS.items()}, paper_values=dict(mod.PAPER_VALUES),
                     default_meaning=mod.default_meaning)
    ctx.table("t", [{"paper_x": 1.0}])
    changed = ("seeds=2 (default: the paper's 5)"
               + (", fcf_lr=0.05 (default: the paper's: the lr chosen for BPR-MF)" if "fcf_lr" in mod.PARAMS else ""))
    assert ctx.notes == [f"**Not the paper's setting.** the paper_* columns are the published figures for the paper's "
                         f"data and settings; this run differs (parameters changed: {changed}), so its figures are not "
                         "expected to match them."]


def test_personalfr_compression_shows_no_spread_for_one_repeat(tmp_path):
    # repeats=1: every _std column read 0.000, a measured spread of none
    out = tmp_path / "c"
    run_scenario("personalfr_compression", data="tiny", out=out, quiet=True,
                 overrides={"clients": [1, 2], "rounds": 1, "repeats": 1, "workers": 1})
    rows = _csv(out / "compression.csv")
    stds = [k for k in rows[0] if k.endswith("_std")]
    assert len(stds) == 6 and all(r[k] == "" for r in rows for k in stds) and all(r["repeats"] == "1" for r in rows)
    assert "mean (and population std, none for one repeat) over the repeats" in (out / "report.md").read_text()


def test_fpl_pi_peaks_table_corrects_over_its_own_tests(tmp_path, monkeypatch):
    # the peaks table is the verdicts' peak claims: the family of its Holm correction is its own
    # tests (one per preset with an interior pi to test), not the whole verdicts table's (here it
    # also held sFPL+ against sFPL on P@10, a test this report does not show)
    from fedsim.math.stats import holm
    from fedsim.studies.fpl.analysis import fmt_p

    seen = _spy_comparisons(monkeypatch)
    out, report = _run(tmp_path, "fpl_pi", {"epochs": [1], "pis": [0.2, 0.6, 1.0], "presets": ["sFPL", "sFPL+", "pFPL"],
                                            "max_users": 40, "min_interactions": 8, "seeds": 1, "workers": 1},
                       data="ml100k-like")
    peaks = _csv(out / "peaks.csv")
    assert [r["claim"].split(":")[0] for r in peaks] == ["sFPL", "sFPL+", "pFPL", "pFPL+"]
    tested = [r for r in peaks if r["p (Holm)"]]
    assert len(tested) == 3  # pFPL+ did not run
    cs = [c for c in seen["all"] if c.metric == "f1"]  # the peak tests alone compare F1, preset by preset
    assert all(f"; {c.text()}; F1@10 by pi: " in r["evidence"] for c, r in zip(cs, tested))
    q = holm([c.t.pvalue for c in cs])
    assert [(r["p (t-test)"], r["p (Holm)"]) for r in tested] == [(fmt_p(c.t.pvalue), fmt_p(x)) for c, x in zip(cs, q)]
    assert "Holm's correction over the 3 tests of this table)" in report


def test_fpl_tcc_names_no_lowest_preset_when_the_lowest_tcc_is_a_tie():
    """Two presets with the same mean TCC (sFPL and pFPL send alike at the same pi and epoch): the
    note named the first of them the lowest, by the order they ran, and with all four presets set
    it beside the paper's pFPL+ as 'a different preset from ours'. A strict lowest is still named."""
    from fedsim.experiment import load_scenario

    note = load_scenario("fpl_tcc").lowest_tcc_note
    tie = [{"preset": "sFPL", "tcc": 100.0, "tcc_sd": float("nan"), "p_at_10": 0.2},
           {"preset": "pFPL", "tcc": 100.0, "tcc_sd": float("nan"), "p_at_10": 0.1},
           {"preset": "sFPL+", "tcc": 150.0, "tcc_sd": float("nan"), "p_at_10": 0.3}]
    text = note(tie)
    assert text.startswith("Lowest mean TCC to the best P@10 among the 3 presets run: a tie between **sFPL** "
                           "(100 vectors, P@10 0.2000), **pFPL** (100 vectors, P@10 0.1000) (mean over seeds): "
                           "no lowest.")
    assert "**sFPL** (100 vectors, P@10 0.2000; mean" not in text
    four = tie + [{"preset": "pFPL+", "tcc": 100.0, "tcc_sd": float("nan"), "p_at_10": 0.25}]
    text = note(four)
    assert "a tie between **sFPL** (100 vectors, P@10 0.2000), **pFPL** (100 vectors, P@10 0.1000), **pFPL+** " in text
    assert text.endswith("The paper's lowest (Table 4, Brazil) is pFPL+: one of the presets tied for our lowest.")
    four[3] = {**four[3], "tcc": 120.0}
    assert note(four).endswith("The paper's lowest (Table 4, Brazil) is pFPL+: none of the presets tied for our "
                               "lowest.")
    # a strict lowest (by hand: 99 < 100) is named as before
    four[1] = {**four[1], "tcc": 99.0}
    assert note(four).startswith("Lowest mean TCC to the best P@10 among the 4 presets run: **pFPL** (99 vectors")
    assert note(four).endswith("is pFPL+: a different preset from ours.")


@pytest.mark.parametrize("lr, diverged", [(1e30, True), (0.05, False)])
def test_fpl_table2_says_which_chosen_models_diverged(tmp_path, lr, diverged):
    """BPR-MF at lr = 1e30 diverges on every candidate: its chosen model ranks nothing, and the
    table showed its P@10 of 0.0000 +- 0.0000 and a significant difference from Top-Pop with no
    word of the divergence in report.md or results.json. At a finite lr nothing is said."""
    import json

    out, report = _run(tmp_path, "fpl_table2", {"methods": ["Top-Pop", "BPR-MF"], "bpr_lrs": [lr], "bpr_epochs": 2,
                                                "max_users": 30, "min_interactions": 8, "seeds": 2, "workers": 1})
    sel = {r["method"]: r for r in _csv(out / "selection.csv")}
    # the validation P@10 of the chosen BPR-MF model is NaN (an empty cell) exactly when it diverged
    assert (sel["BPR-MF"]["validation P@10"] == "") is diverged
    caveats = json.loads((out / "results.json").read_text())["caveats"]
    if diverged:
        assert caveats == ["diverged"]
        assert ("**Diverged.** Every candidate of these chosen models was not finite: BPR-MF (seed(s) 1, 2). Such a "
                "model ranks nothing") in report
    else:
        assert "diverged" not in caveats and "**Diverged.**" not in report


@pytest.mark.parametrize("engine", ["actors", "twin"])
def test_fpl_pi_says_which_runs_diverged_at_their_chosen_epoch(tmp_path, engine):
    # FPL reuses BPR-MF's lr: at 1e30 sFPL diverges in its first epoch; the F1 table's NaN row had no word.
    # On the twin the study stopped with TwinMismatchError (the twin ran the epoch on NaN, the actors'
    # server stopped in its first round): now both engines say the same
    import json

    out, report = _run(tmp_path, "fpl_pi", {"epochs": [1], "pis": [0.5], "presets": ["sFPL"], "bpr_lrs": [1e30],
                                            "bpr_epochs": 2, "max_users": 30, "min_interactions": 8, "seeds": 1,
                                            "workers": 1, "fpl_engine": engine})
    (row,) = _csv(out / "f1_vs_pi.csv")
    assert row["F1@10"] == "" and row["P@10"] == ""
    assert json.loads((out / "results.json").read_text())["caveats"] == ["diverged"]
    assert "was not finite: sFPL (seed(s) 1); sFPL at pi = 0.5 (seed(s) 1). Such a model ranks nothing" in report


def test_quickstart_note_says_no_unrated_item_is_sampled_at_rho_zero():
    # at rho = 0 hybrid filling samples no unrated item, and the note said it "uploads gradients
    # for sampled unrated items beside the rated ones"
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("qs", Path(__file__).resolve().parents[1] / "scenarios" / "quickstart.py")
    qs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(qs)
    rows = [{"rmse": v} for v in (1.0, 1.0, 1.0, 1.0)]
    at0, at1 = qs.comparison_note(rows, 0.0), qs.comparison_note(rows, 1.0)
    assert "sampled unrated items" not in at0 and "hybrid filling at rho = 0 (no unrated item sampled: the same run) " \
        "1.0000, +0.0000 against rho = 0 (no difference in accuracy)" in at0
    assert "hybrid filling at rho = 1, which uploads gradients for sampled unrated items beside the rated ones, " \
        "1.0000, +0.0000 against rho = 0 (no difference in accuracy)" in at1


def test_notes_write_a_difference_that_rounds_to_zero_without_a_minus_sign():
    # FedRec++ 4e-10 below FedRec at rho = 0 read "-0.0000 against rho = 0" (and an FPL comparison of
    # methods 3e-6 apart "= -0.0000"): a negative zero reads as a difference with a sign
    import importlib.util
    from pathlib import Path

    from fedsim.studies.fpl.analysis import compare_users

    spec = importlib.util.spec_from_file_location("qs", Path(__file__).resolve().parents[1] / "scenarios" / "quickstart.py")
    qs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(qs)
    rho0 = 0.9203554660682525
    note = qs.comparison_note([{"rmse": v} for v in (rho0, rho0, rho0 - 2e-9, rho0 - 4e-10)], 1.0)
    assert "-0.0000" not in note
    assert "beside the rated ones, 0.9204, +0.0000 against rho = 0 (no difference in accuracy)" in note
    assert "FedRec++ with one denoiser 0.9204, +0.0000 against rho = 0: it equals FedRec" in note
    a = np.linspace(0.1, 0.3, 12)
    b = a + 3e-6
    assert compare_users("pFPL", "FPL", "p", a, b).text().startswith("pFPL - FPL P@10 = +0.0000 (95 % CI +0.0000 "
                                                                     "to +0.0000; ")
    assert compare_users("pFPL", "FPL", "p", a[:2], b[:2]).text().startswith("pFPL - FPL P@10 = +0.0000 over 2 user")


def test_personalfr_checks_order_no_figures_that_print_alike(tmp_path):
    # "explicit, M = 100: PersonalFR 0.9000 vs FedAvg 0.9000: PersonalFR better": the figures differ
    # beyond the 4 decimals printed, and the check ordered them all the same
    from fedsim.experiment.context import RunContext
    from fedsim.studies.personalfr import verdicts

    def row(task, method, clients, sel, sd):
        return {"task": task, "method": method, "clients": clients, "selected": sel, "selected_std": sd}

    ctx = RunContext("t", {}, "tiny", 1, None, tmp_path, quiet=True)
    verdicts(ctx, [row("explicit", "joint", "1 (central)", 0.90003, 0.00001),
                   row("explicit", "fedavg", "100", 0.90002, 0.00001),
                   row("explicit", "personalfr", "100", 0.89998, 0.00001),  # 0.9000 vs 0.9000
                   row("explicit", "fedavg", "300", 0.90004, 0.00001),
                   row("explicit", "personalfr", "300", 0.89994, 0.00001),  # 0.8999 vs 0.9000: ordered
                   row("implicit", "fedavg", "4", 0.81236, 0.0),
                   row("implicit", "personalfr", "4", 0.81244, 0.0)])  # 0.8124 vs 0.8124
    assert ctx.notes == ["Checks (the selected evaluations):\n\n"
                         # Joint 0.90003 is behind both in the 5th decimal: as printed, level with both
                         "- explicit, M = 100: PersonalFR 0.9000 vs FedAvg 0.9000: equal to 4 decimals; "
                         "Joint 0.9000 at least as good as both\n"
                         "- explicit, M = 300: PersonalFR 0.8999 vs FedAvg 0.9000: PersonalFR better; "
                         "Joint 0.9000 NOT at least as good as both\n"
                         "- implicit, M = 4: PersonalFR 0.8124 vs FedAvg 0.8124: equal to 4 decimals"]


def test_privacy_audit_labels_one_round_windows_once_and_names_personalfrs_setting(tmp_path):
    # iterations=1 and link_iterations=1: windows read "1 rounds" (and once labelled "1 round",
    # the several-round attacks were the one-round ones again, pooled as two seeds: 58 users of
    # 29); PersonalFR's line in the F1 note read "personalfr (), personalfr_indices ..."
    out, report = _run(tmp_path, "privacy_audit", {"protocols": ["fedrecpp", "personalfr"], "iterations": 1,
                                                   "defences": [], "etas": ["1"], "link_iterations": 1,
                                                   "link_profiles": [], "workers": 1, "personalfr_clients": 5},
                       profile="ideal")
    assert "1 rounds" not in report
    rows = _csv(out / "leakage.csv")
    # (one row per setting: the uncompressed PersonalFR runs are told apart by their defence label)
    keys = [(r["protocol"], r["defence"], r["attack"], r["adversary"], r["window"]) for r in rows]
    assert len(keys) == len(set(keys)) == 12
    assert [(r["attack"], r["window"], r["users"]) for r in rows if r["protocol"] == "fedrecpp"] == [
        ("implied_ratings", "1 round", "29.0"), ("intersection", "1 round", "29.0"),
        ("noise_matching", "1 round", "29.0"), ("noise_matching[1]", "1 round", "29.0"), ("imia", "1 round", "29.0")]
    assert {r["window"] for r in _csv(out / "linking.csv")} == {"1 round"}
    assert "\n- personalfr (clients 5), personalfr_indices [server, all]: F1 1.000 (random 1.000), exact 1.000" in report


def test_privacy_audit_says_which_protocols_it_measures_no_accuracy_of(tmp_path):
    # PersonalFR's leakage rows had accuracy nan and an empty accuracy_metric, unexplained
    out, report = _run(tmp_path, "privacy_audit", {"protocols": ["personalfr"], "defences": [], "workers": 1,
                                                   "personalfr_clients": 5}, profile="ideal")
    rows = _csv(out / "leakage.csv")
    assert rows and {(r["protocol"], r["accuracy_metric"], r["accuracy"]) for r in rows} == {("personalfr", "", "")}
    assert ("No accuracy is measured for personalfr: the audit runs it for what its messages reveal and evaluates no "
            "model, so its `accuracy` is NaN and its `accuracy_metric` empty.") in report
