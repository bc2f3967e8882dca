"""What the FPL scenarios (``fpl_table2``, ``fpl_pi``, ``fpl_fig3``, ``fpl_tcc``) share: the
paper's figures printed beside ours, their common parameters, the data preparation they note in
the report, the study they run (through one cache, so they share runs), and the settings note
that says whenever a run departs from the paper's settings."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...data import SYNTHETIC_PRESETS
from ...experiment import Param, RunContext, UsageError, plural
from ...math.fpl_presets import PRESET_NAMES
from ...math.metrics import bias_disparity
from .data import ImplicitSplit, LoaderFilterError, NoUserLeftError, loader_min_interactions, prepare
from ..faults import FAULT_STUDY, refuse_faults
from .settings import Settings, deviations, settings_from, settings_params
from .study import Study, StudyOptions, run_study

__all__ = [
    "CATEGORY_ABBREVIATIONS", "FPL_SETTINGS", "PAPER_BEST_PI", "PAPER_COUNTRIES", "PAPER_TABLE2", "PAPER_TABLE3",
    "PAPER_TABLE4_BRAZIL", "PAPER_TABLE5", "PAPER_TABLE6_BRAZIL", "PRESET_STYLES", "category_labels", "fpl_scenario_params", "note_settings",
    "scenario_params", "scenario_split", "scenario_study", "source_bias",
]

PAPER_COUNTRIES = ("Brazil", "Canada", "Italy")
# Table 2: P@10, R@10 per country
PAPER_TABLE2 = {
    "Brazil": {"Random": (0.00013, 0.00015), "Top-Pop": (0.01909, 0.02375), "User-kNN": (0.10600, 0.13480),
               "Item-kNN": (0.07716, 0.09607), "VAE": (0.10320, 0.13153), "BPR-MF": (0.07702, 0.09494),
               "FCF": (0.03089, 0.03749), "sFPL": (0.07757, 0.09581), "sFPL+": (0.08682, 0.11004),
               "pFPL": (0.07771, 0.09582), "pFPL+": (0.08733, 0.11085)},
    "Canada": {"Random": (0.00030, 0.00035), "Top-Pop": (0.04239, 0.04679), "User-kNN": (0.07639, 0.07533),
               "Item-kNN": (0.04006, 0.03881), "VAE": (0.06060, 0.06317), "BPR-MF": (0.03694, 0.03650),
               "FCF": (0.03724, 0.03836), "sFPL": (0.04515, 0.04550), "sFPL+": (0.05701, 0.05665),
               "pFPL": (0.04582, 0.04637), "pFPL+": (0.05761, 0.05755)},
    "Italy": {"Random": (0.00030, 0.00029), "Top-Pop": (0.04634, 0.05506), "User-kNN": (0.06881, 0.07833),
              "Item-kNN": (0.04663, 0.05356), "VAE": (0.10421, 0.21324), "BPR-MF": (0.04560, 0.05458),
              "FCF": (0.03126, 0.03708), "sFPL": (0.04701, 0.05600), "sFPL+": (0.05595, 0.06229),
              "pFPL": (0.04642, 0.05465), "pFPL+": (0.05565, 0.06291)},
}
# Table 3: IC@10, G@10 per country
PAPER_TABLE3 = {
    "Brazil": {"Random": (46120, 0.70946), "Top-Pop": (19, 0.00020), "User-kNN": (3083, 0.01159),
               "Item-kNN": (16535, 0.07449), "VAE": (5503, 0.02117), "BPR-MF": (2552, 0.00756),
               "FCF": (911, 0.00095), "sFPL": (1581, 0.00561), "sFPL+": (5200, 0.01449), "pFPL": (2114, 0.00638),
               "pFPL+": (3820, 0.01106)},
    "Canada": {"Random": (10815, 0.26809), "Top-Pop": (18, 0.00030), "User-kNN": (609, 0.00321),
               "Item-kNN": (4393, 0.05404), "VAE": (1044, 0.00652), "BPR-MF": (1216, 0.00998),
               "FCF": (504, 0.00174), "sFPL": (451, 0.00243), "sFPL+": (1510, 0.01259), "pFPL": (425, 0.00213),
               "pFPL+": (1214, 0.00981)},
    "Italy": {"Random": (10478, 0.28914), "Top-Pop": (19, 0.00035), "User-kNN": (577, 0.00282),
              "Item-kNN": (3241, 0.03293), "VAE": (165, 0.02336), "BPR-MF": (19, 0.00036), "FCF": (403, 0.00158),
              "sFPL": (18, 0.00036), "sFPL+": (932, 0.00789), "pFPL": (96, 0.00056), "pFPL+": (936, 0.00725)},
}
# best pi per preset (Tables 2-3 footnote)
PAPER_BEST_PI = {
    "Brazil": {"sFPL": 0.5, "sFPL+": 0.9, "pFPL": 0.8, "pFPL+": 0.8},
    "Canada": {"sFPL": 0.1, "sFPL+": 0.4, "pFPL": 0.1, "pFPL+": 0.3},
    "Italy": {"sFPL": 0.4, "sFPL+": 0.2, "pFPL": 1.0, "pFPL+": 0.1},
}
# Table 4 (Brazil): best P@10 per preset, its pi and its TCC (x 1e12 vectors); epochs 45/50/45/35
PAPER_TABLE4_BRAZIL = {
    "sFPL": (0.5, 0.07757, 1.27624, 45), "sFPL+": (0.9, 0.08682, 1.41996, 50),
    "pFPL": (0.8, 0.07771, 1.27625, 45), "pFPL+": (0.8, 0.08733, 0.99390, 35),
}
#: Colour and marker per preset, as the paper's figures (dark/light: sequential/parallel; blue/green: plain/"+").
PRESET_STYLES = {"sFPL": ("#1f3b73", "s"), "sFPL+": ("#1b6e3a", "s"), "pFPL": ("#5b9bd5", "o"),
                 "pFPL+": ("#7fcf7f", "o")}
CATEGORY_ABBREVIATIONS = {
    "Arts & Entertainment": "A&E", "College & University": "C&U", "Food": "Food", "Nightlife Spot": "NS",
    "Outdoors & Recreation": "O&R", "Professional & Other Places": "P&OP", "Residence": "Res.",
    "Shop & Service": "S&S", "Travel & Transport": "T&T",
}
# Table 5: source bias B_T in the training data, categories in the order above
PAPER_TABLE5 = {
    "Brazil": (1.4949, 0.6289, 1.1024, 1.3286, 1.1340, 0.6424, 0.5202, 0.8314, 1.3699),
    "Canada": (1.7224, 0.8310, 1.0879, 1.6594, 0.9719, 0.6610, 0.4134, 0.8087, 1.2328),
    "Italy": (1.4130, 0.8221, 0.9317, 1.3559, 1.3292, 0.7868, 0.4171, 0.8482, 1.2678),
}
# Table 6 (Brazil only in the paper): BD@10 per category
PAPER_TABLE6_BRAZIL = {
    "Random": (-0.325, 0.559, -0.080, -0.245, -0.143, 0.549, 0.911, 0.203, -0.273),
    "Top-Pop": (-1.000, -1.000, -0.302, -1.000, -0.999, -1.000, -1.000, -1.000, 6.660),
    "User-kNN": (0.445, -0.832, 0.261, -0.213, 0.162, -0.842, -0.969, -0.431, 0.621),
    "Item-kNN": (0.346, 0.140, 0.068, -0.102, 0.153, -0.347, -0.381, -0.227, 0.083),
    "VAE": (0.393, -0.723, 0.223, -0.315, 0.194, -0.776, -0.911, -0.310, 0.572),
    "BPR-MF": (0.301, -0.712, 0.232, -0.710, 0.142, -0.758, -0.992, -0.434, 1.165),
    "FCF": (-0.464, -0.968, 0.687, -0.910, 0.135, -0.960, -0.994, -0.946, 1.239),
    "sFPL": (0.272, -0.738, 0.263, -0.756, 0.161, -0.814, -0.997, -0.368, 1.072),
    "sFPL+": (0.311, -0.675, 0.160, -0.396, 0.278, -0.806, -0.903, -0.291, 0.812),
    "pFPL": (0.253, -0.813, 0.218, -0.613, 0.143, -0.739, -0.992, -0.479, 1.239),
    "pFPL+": (0.154, -0.566, 0.190, -0.351, 0.345, -0.764, -0.913, -0.410, 0.778),
}


def scenario_params(exclude: tuple[str, ...] = ()) -> dict[str, Param]:
    """Parameters common to the FPL scenarios: the settings switch and its overrides, and how
    the study runs."""
    return {
        **settings_params(exclude),
        "protocol": Param("validation", "validation: fit on train minus the validation cut, choose every "
                          "hyperparameter on validation P@10, report test; test: fit on the 80 %, choose on test",
                          choices=("validation", "test")),
        "max_users": Param(-1, "keep a seeded random subset of this many users first (0: all; -1: 100 on "
                           "synthetic data, all on real data)"),
        "gini_items": Param("data", "the items G@10 is over: data (every item of the filtered data, test-only ones "
                            "included, which no list can hold) or catalogue (the training items, those the lists "
                            "rank); IC@10 counts items, the same either way", choices=("data", "catalogue")),
        "rounding": Param("round", "integer T and rpe: round (nearest) or floor (the authors' int())",
                          choices=("round", "floor")),
        "paper_country": Param("Italy", "the paper's data set whose figures are printed beside ours",
                               choices=PAPER_COUNTRIES),
        "workers": Param(2, "worker processes (each job is seeded on its own: results do not depend on this)",
                         min=1),
        "fpl_engine": Param("auto", "twin: FPL's search over pi and epochs on the message-free replay (bit-identical "
                            "to the actors), then each chosen configuration as actors with its ledger; actors: every "
                            "FPL run as actors; auto: twin when numba is installed (the `fast` extra), else actors",
                            choices=("auto", "twin", "actors")),
        "cache": Param("", "folder caching each run, shared by the FPL scenarios ('' = none)"),
    }


#: The settings an FPL-only scenario (fpl_pi, fpl_fig3, fpl_tcc) depends on (its report lists
#: departures from the paper's among these only).
FPL_SETTINGS = ("user_filter", "min_interactions", "seeds", "pis", "epochs", "epoch_step", "bpr_lrs", "bpr_ds",
                "bpr_epochs")


def fpl_scenario_params() -> dict[str, Param]:
    """Parameters of an FPL-only scenario: :func:`scenario_params` without the baselines' and
    ``presets``."""
    return {**scenario_params(exclude=("fcf_rounds", "fcf_lr", "knn_ks", "vae_topologies", "vae_epochs")),
            "presets": Param(list(PRESET_NAMES), "FPL presets to run", kind="strs", choices=PRESET_NAMES)}


def _is_synthetic(spec: str) -> bool:
    s = str(spec).strip()
    return s.startswith("synthetic:") or s in SYNTHETIC_PRESETS


def scenario_split(ctx: RunContext, settings: Settings) -> ImplicitSplit:
    """Load ``--data`` and prepare it as the settings say; notes what was done. A loader that
    filters users itself (Foursquare files: more than 20 venues by default) is asked to load
    everyone when the settings keep more users than it did."""
    threshold = settings.threshold
    ratings = ctx.load_data()
    if loader_min_interactions(ratings) > threshold:
        ratings = ctx.load_data(user_filter=None)
    max_users = int(ctx["max_users"])
    if max_users < 0:
        max_users = 100 if _is_synthetic(ctx.data) else 0
    try:
        sp = prepare(ratings, min_interactions=threshold, protocol=ctx["protocol"], max_users=max_users,
                     seed=ctx.seed, gini_items=ctx.config.get("gini_items", "data"))
    except LoaderFilterError as exc:  # pragma: no cover - the reload above prevents it
        raise UsageError(str(exc)) from None
    except NoUserLeftError as exc:  # the data are too small for the filter: a traceback before
        rule = "" if int(ctx["min_interactions"]) else f", the threshold of user_filter {settings.user_filter!r}"
        raise UsageError(f"--set min_interactions: --data {ctx.data}: {exc}{rule}; set a lower min_interactions") \
            from None
    i = sp.info
    rule = {21: "more than 20 interactions, the paper's filter", 20: "at least 20, the authors' code's filter"}
    cats = ""
    if sp.category_names:
        cats = (f" Item categories: {len(sp.category_names)} ({', '.join(category_labels(sp))}); items without a "
                f"category: {i.get('items_without_category', 0)}")
        if "unmapped_types" in i:
            cats += f"; venue types the map does not know: {i['unmapped_types']}"
        cats += "."
    ctx.note(f"Data `{ctx.data}`: {i['users']} users ({rule.get(threshold, f'at least {threshold} interactions')}"
             + (f", a random {max_users} first" if max_users else "") + f"), {i['items']} items, training "
             f"catalogue {i['catalogue']}; fitted on X+ = {i['x_plus']} interactions (protocol `{sp.protocol}`: "
             f"validation {i['validation']}, test {i['test']}, of which {i['test_unreachable']} on items outside "
             f"the catalogue)." + cats
             + (f" G@10 is over the {i['catalogue']} catalogue items (`gini_items=catalogue`), not the data's "
                f"{i['items']}." if i["gini_items"] == "catalogue" else ""))
    return sp


def note_settings(ctx: RunContext, settings: Settings, used: tuple[str, ...] | None = None) -> list[str]:
    """Note in the report which settings ran and every departure from the paper's; returns the
    departures."""
    dev = deviations(settings, used)
    if settings.name == "paper" and not dev:
        ctx.note("**Settings: the paper's** (section 5.3; `--set settings=paper`), with "
                 f"{settings.seeds} seeds.")
    else:
        ctx.note(f"**Settings: `{settings.name}`. These are NOT the paper's settings** "
                 "(`--set settings=paper` runs them); departures:\n\n" + "\n".join(f"- {d}" for d in dev))
    return dev


def scenario_study(ctx: RunContext, methods: tuple[str, ...], used: tuple[str, ...] | None = None,
                   fpl_engine: str | None = None) -> Study:
    """Settings from the scenario's parameters, the split, and the study of ``methods``, with
    progress, network records and the settings note on ``ctx``. ``fpl_engine`` overrides the
    ``fpl_engine`` parameter (fpl_tcc needs every FPL run's ledger: "actors")."""
    settings = settings_from(ctx.config)
    if {"FCF", *PRESET_NAMES} & set(methods):
        # refused before any work: FPL's twin refused it as a worker's traceback, and the actors' runs (no
        # deadline) ended in a DeadlockError advising a --set deadline these scenarios do not have
        refuse_faults(ctx.net, "the FPL scenarios run FPL and FCF with no deadline", FAULT_STUDY, UsageError)
    split = scenario_split(ctx, settings)
    note_settings(ctx, settings, used)
    seeds = [ctx.seed + k for k in range(settings.seeds)]
    opts = StudyOptions(seeds=seeds, cache=ctx["cache"], workers=int(ctx["workers"]), net=ctx.net,
                        rounding=ctx["rounding"], ledger_dir=ctx.ledger_dir, methods=methods,
                        fpl_engine=fpl_engine or ctx["fpl_engine"])

    def progress(done, total, stage):
        ctx.progress.update(done, total, stage=stage)

    st = run_study(split, settings, opts, progress=progress, record=ctx.record_run)
    for m, why in st.skipped.items():
        ctx.note(f"**{m} did not run**: {why}.")
    bad = diverged_choices(st)
    if bad:
        # a chosen model that diverged ranks nothing: the tables showed its P@10 of 0 (NaN per pi) and
        # the comparisons tested it as a method, with no word of it in report.md or results.json
        ctx.caveat("diverged", "**Diverged.** Every candidate of these chosen models was not finite: "
                   + "; ".join(bad) + ". Such a model ranks nothing: its figures in the tables (0 over seeds, NaN "
                   "per pi) and its comparisons are those of no recommendation, not of a trained model.")
    ctx.note(f"Study: {st.jobs_run} job(s) run, {st.jobs_cached} read from the cache, seeds {seeds[0]}.."
             f"{seeds[-1]}, {int(ctx['workers'])} worker process(es), {st.wall_s:.1f} s.")
    if st.fpl_runs() and st.fpl_engine == "actors" and (fpl_engine or ctx.config.get("fpl_engine")) == "auto":
        ctx.note("FPL ran as actors throughout (numba is not installed, so its message-free twin would run as "
                 "slow pure-Python loops; `pip install 'fedsim[fast]'` makes the search minutes instead of hours).")
    if st.confirmed:
        n_fpl = len(st.fpl_runs())
        epochs = sum(int(r.curve[-1]["epoch"]) for r in st.confirmed.values())
        ctx.note(f"FPL's search ({plural(n_fpl, 'run')}: every preset, pi and seed) ran on the message-free twin "
                 "(`fedsim.math.fpl_central`: the actors' epoch replayed from the same random streams, bit-identical "
                 f"to them); {'the' if len(st.confirmed) == 1 else 'each of the'} {plural(len(st.confirmed), 'chosen configuration')} then ran as actors on the "
                 f"simulated network to its chosen epoch ({plural(epochs, 'epoch')} in all, with their ledgers), and every one "
                 "reproduced the twin's figures to the last bit (the study stops otherwise).")
    return st


def _diverged(entry: dict) -> bool:
    return bool(entry.get("test_diverged")) or math.isnan(float(entry.get("test_p", math.nan)))


def diverged_choices(st) -> list[str]:
    """The chosen models of a :class:`~fedsim.studies.fpl.study.Study` that diverged (chosen only
    when every candidate did: NaN test figures), as text: per method its seeds, then per FPL run
    (preset, pi) whose chosen epoch diverged, its seeds; empty when none did."""
    out = []
    for m in st.methods():
        seeds = [s for s, c in sorted(st.chosen[m].items()) if _diverged(c.entry)]
        if seeds:
            out.append(f"{m} (seed(s) {', '.join(map(str, seeds))})")
    per_pi: dict = {}
    for preset, pi, s in sorted(st.fpl_runs(), key=lambda k: (PRESET_NAMES.index(k[0]), k[1], k[2])):
        if _diverged(st.fpl_choice(preset, pi, s)):
            per_pi.setdefault((preset, pi), []).append(s)
    out += [f"{p} at pi = {pi:g} (seed(s) {', '.join(map(str, seeds))})" for (p, pi), seeds in per_pi.items()]
    return out


def category_labels(split: ImplicitSplit) -> list[str]:
    """Short column labels of the item categories (the paper's abbreviations for Foursquare's
    top-level categories; other names cut to 12 characters)."""
    return [CATEGORY_ABBREVIATIONS.get(n, n if len(n) <= 12 else n[:11] + ".") for n in split.category_names or ()]


def source_bias(split: ImplicitSplit) -> dict[str, float]:
    """B_T per category (the paper's Table 5) of the fitted part, by short label."""
    ev = next(iter(split.evaluators.values()))
    if ev.categories is None:
        return {}
    bd = bias_disparity(ev.train_items, np.full((1, ev.n), -1), ev.categories, ev.n)
    return {n: float(v) for n, v in zip(category_labels(split), bd.source)}


def paper_value(table: dict, country: str, method: str, k: int) -> Any:
    row = table.get(country, {}).get(method)
    return math.nan if row is None else row[k]
