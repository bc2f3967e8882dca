"""FPL studies: the implicit-feedback pipeline, top-N evaluation with per-user figures, run helpers
for FPL, FCF, BPR-MF, Top-Pop and Random (CCE read from the ledger), the library baselines
(User-kNN, Item-kNN, VAE through cornac), the whole study over seeds with the paper's searches, and
its statistics.

Data (:func:`prepare`): every rating is a positive interaction (``binarize()``), users with
``min_interactions`` or more are kept (21, i.e. "more than 20", is the paper's filter; the
authors' code keeps >= 20), then the per-user temporal hold-out: each user's most recent
``floor(0.2 n_u)`` interactions are the test part, and the same cut of the remaining ones the
validation part (``temporal_holdout_with_validation``). A loader that already filtered more
strictly than asked makes :func:`prepare` raise (:class:`LoaderFilterError`).

Protocols (what a model is fitted on and what it is evaluated on):

``validation`` (default) fit on train (= the 80 % minus its validation cut); every epoch is
               evaluated on the validation part (ranking everything but the training items) and
               on the test part (ranking everything but training and validation items). Every
               hyperparameter is chosen by validation P@10 and its test figures are reported:
               the paper's section 5.3, without retraining on train + validation.
``test``       fit on the full 80 %; evaluate the test part only; choose on test (a sanity
               protocol).

Rankings never include an item without a training interaction (it cannot be learnt): the
catalogue is the fitted part's items. G@10 is over every item of the data nonetheless (those
never recommendable count as never recommended; ``gini_items="catalogue"``: over the catalogue),
IC@10 counts items (docs/fpl.md, "Which items IC@10 and G@10 are over"). The test evaluation keeps each user's hit mask
(:mod:`fedsim.math.hitmask`), from which every per-user P, R, F1 and NDCG follows: the paired
tests and confidence intervals of :mod:`.analysis` use them.

Communication: every FPL/FCF number comes from the run's ledger (``cce_ledger``: the units, i.e.
vectors, of the training kinds in one epoch); the closed forms are computed beside it as checks.
Long FPL runs are split into one network per epoch (state carried over through ``build``'s
``init``/``user_factors``), which keeps each ledger small and lets the model be evaluated between
epochs; network seeds are derived per epoch from the run seed.

Modules, everything public importable from here: :mod:`.data` (``prepare``, ``ImplicitSplit``,
``Evaluator``), :mod:`.runs` (``run_fpl``, ``run_fcf``, ``run_bpr``, ``run_toppop``,
``run_random``, ``RunRecord``, ``best_epoch``, ledger figures), :mod:`.baselines` (cornac
adapters, the ``baselines`` extra), :mod:`.cache` (``run_cached``), :mod:`.settings` (the paper's
settings and the quick ones), :mod:`.study` (``run_study``), :mod:`.analysis` (statistics and
verdicts) and :mod:`.scenario` (what the FPL scenarios share).
"""

from .analysis import ALPHA, MIN_USERS, Comparison, compare, compare_users, fig2_rows, seed_stats, user_values, verdicts
from .cache import run_cached
from .data import EVAL_VERSION, Evaluator, ImplicitSplit, LoaderFilterError, NoUserLeftError, loader_min_interactions, prepare
from .runs import (
    RunRecord, best_epoch, candidate_epochs, epoch_seed, flatten_metrics, ledger_tcc, mean_cce, network_faults,
    run_bpr, run_fcf, run_fpl, run_random, run_toppop,
)
from .scenario import (
    CATEGORY_ABBREVIATIONS, FPL_SETTINGS, PAPER_BEST_PI, PAPER_COUNTRIES, PAPER_TABLE2, PAPER_TABLE3, PAPER_TABLE4_BRAZIL,
    PAPER_TABLE5, PAPER_TABLE6_BRAZIL, PRESET_STYLES, category_labels, fpl_scenario_params, note_settings, scenario_params, scenario_split,
    scenario_study, source_bias,
)
from .settings import PAPER, QUICK, SETTINGS, Settings, default_meaning, deviations, settings_from, settings_params
from .study import METHOD_ORDER, Choice, Study, StudyOptions, choices_summary, run_study

__all__ = [
    "ALPHA", "CATEGORY_ABBREVIATIONS", "EVAL_VERSION", "FPL_SETTINGS", "METHOD_ORDER", "MIN_USERS", "PAPER", "PAPER_BEST_PI", "PAPER_COUNTRIES",
    "PAPER_TABLE2", "PAPER_TABLE3", "PAPER_TABLE4_BRAZIL", "PAPER_TABLE5", "PAPER_TABLE6_BRAZIL", "PRESET_STYLES", "QUICK",
    "SETTINGS", "Choice", "Comparison", "Evaluator", "ImplicitSplit", "LoaderFilterError", "NoUserLeftError", "RunRecord", "Settings",
    "Study", "StudyOptions", "best_epoch", "candidate_epochs", "category_labels", "choices_summary", "compare",
    "compare_users", "default_meaning", "deviations", "epoch_seed", "fig2_rows", "flatten_metrics", "fpl_scenario_params", "ledger_tcc",
    "loader_min_interactions", "mean_cce", "network_faults", "note_settings", "prepare", "run_bpr", "run_cached", "run_fcf",
    "run_fpl", "run_random", "run_study", "run_toppop", "scenario_params", "scenario_split", "scenario_study",
    "seed_stats", "settings_from", "settings_params", "source_bias", "user_values", "verdicts",
]
